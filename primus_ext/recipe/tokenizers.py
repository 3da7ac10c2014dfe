"""Vocabulary sizes of known tokenizers, for recipes that leave ``vocab_size`` unset.

Megatron reads the vocabulary from the tokenizer at start-up; a projection cannot load it, so the
loader looks the tokenizer up here (by ``tokenizer_model``, the Hugging Face id, else by its family
prefix). Unknown tokenizers are a Problem asking for ``vocab_size``.

    >>> vocab_size_of("meta-llama/Llama-3.1-8B")
    128256
"""

from __future__ import annotations

ARCHS = "shared/validation/model_archs.csv"

VOCAB_BY_PREFIX: tuple[tuple[str, int, str], ...] = (
    # (tokenizer_model prefix, vocabulary, source)
    ("meta-llama/Llama-2", 32000, f"{ARCHS} Llama2-7B/13B/70B"),
    ("meta-llama/Meta-Llama-3", 128256, f"{ARCHS} Llama3-8B/70B (Llama-3 tokenizer)"),
    ("meta-llama/Llama-3", 128256, f"{ARCHS} Llama3.1-8B/70B/405B (Llama-3 tokenizer)"),
    ("mistralai/Mixtral-8x", 32000, f"{ARCHS} Mixtral-8x7B/8x22B"),
    ("deepseek-ai/DeepSeek-V3", 129280, f"{ARCHS} DeepSeek-V3"),
    ("deepseek-ai/DeepSeek-V2", 102400, "huggingface.co/deepseek-ai/DeepSeek-V2(-Lite) config.json vocab_size"),
    ("moonshotai/Kimi-K2", 163840, f"{ARCHS} Kimi-K2"),
    ("Qwen/Qwen3-", 151936, f"{ARCHS} Qwen3-30B-A3B / Qwen3-235B-A22B"),
    ("openai/gpt-oss-", 201088, f"{ARCHS} GPT-OSS-20B/120B"),
)


def vocab_size_of(tokenizer_model: str | None) -> int | None:
    """The unpadded vocabulary of a known tokenizer id, or ``None``."""
    if not tokenizer_model:
        return None
    for prefix, vocab, _source in VOCAB_BY_PREFIX:
        if tokenizer_model.startswith(prefix):
            return vocab
    return None
