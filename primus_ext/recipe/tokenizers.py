"""Vocabulary sizes of known tokenizers, for recipes that leave ``vocab_size`` unset.

Megatron reads the vocabulary from the tokenizer at start-up; a projection cannot load it, so the
resolver looks it up here: by ``tokenizer_model`` (the Hugging Face id, longest matching prefix first),
else by Megatron's / Primus's ``tokenizer_type``. Every tokenizer the Primus model presets name (commit
fd1eeab, ``primus/configs/models/megatron``) is in the table. Sizes are the ``vocab_size`` of each
model's published ``config.json`` (the embedding rows the checkpoint has), as the validation data's
``model_archs.csv`` records them where it has the model.

    >>> vocab_size_of("meta-llama/Llama-3.1-8B")
    128256
    >>> vocab_size_of(None, "Llama2Tokenizer")
    32000

A tokenizer the table does not know is projected at ``ASSUMED_VOCAB`` with the assumption stated
(``resolve._vocab``), never silently.
"""

from __future__ import annotations

ARCHS = "shared/validation/model_archs.csv"
HF = "huggingface.co/{} config.json vocab_size"

VOCAB_BY_PREFIX: tuple[tuple[str, int, str], ...] = (
    # (tokenizer_model prefix, vocabulary, source); longer prefixes are tried first (see vocab_size_of)
    ("meta-llama/Llama-2", 32000, f"{ARCHS} Llama2-7B/13B/70B"),
    ("meta-llama/Meta-Llama-3", 128256, f"{ARCHS} Llama3-8B/70B (Llama-3 tokenizer)"),
    ("meta-llama/Llama-3", 128256, f"{ARCHS} Llama3.1-8B/70B/405B (Llama-3 tokenizer; 3.2 / 3.3 share it)"),
    ("meta-llama/Llama-4-", 202048, HF.format("meta-llama/Llama-4-Scout-17B-16E") + " (text_config; Maverick too)"),
    ("mistralai/Mixtral-8x", 32000, f"{ARCHS} Mixtral-8x7B/8x22B"),
    ("deepseek-ai/DeepSeek-V3", 129280, f"{ARCHS} DeepSeek-V3"),
    ("deepseek-ai/DeepSeek-V4", 129280, "Primus deepseek_v4_flash.yaml / deepseek_v4_pro.yaml vocab_size"),
    ("deepseek-ai/DeepSeek-V2", 102400, HF.format("deepseek-ai/DeepSeek-V2(-Lite)")),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", 151936, HF.format("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B")),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-", 152064, HF.format("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B / 14B / 32B")),
    ("NousResearch/Meta-Llama-3", 128256, "the Llama-3 tokenizer (NousResearch's ungated copy of meta-llama's)"),
    ("NousResearch/Llama-2-", 32000, "the Llama-2 tokenizer (NousResearch's ungated copy of meta-llama's)"),
    ("EleutherAI/gpt-neox-20b", 50432, HF.format("EleutherAI/gpt-neox-20b")),
    ("moonshotai/Kimi-K2", 163840, f"{ARCHS} Kimi-K2"),
    ("moonshotai/Kimi-K3", 163840, "Primus kimi_k3.yaml vocab_size"),
    ("Qwen/Qwen3-", 151936, f"{ARCHS} Qwen3-30B-A3B / Qwen3-235B-A22B (the dense Qwen3 share it)"),
    ("Qwen/Qwen2.5-0.5B", 151936, HF.format("Qwen/Qwen2.5-0.5B")),
    ("Qwen/Qwen2.5-1.5B", 151936, HF.format("Qwen/Qwen2.5-1.5B")),
    ("Qwen/Qwen2.5-3B", 151936, HF.format("Qwen/Qwen2.5-3B")),
    ("Qwen/Qwen2.5-", 152064, HF.format("Qwen/Qwen2.5-7B / 14B / 32B / 72B")),
    ("openai/gpt-oss-", 201088, f"{ARCHS} GPT-OSS-20B/120B"),
    ("THUDM/glm-4-", 151552, HF.format("THUDM/glm-4-9b") + " (padded_vocab_size)"),
    ("MiniMaxAI/MiniMax-M2", 200064, HF.format("MiniMaxAI/MiniMax-M2")),
    ("LiquidAI/LFM2-", 65536, HF.format("LiquidAI/LFM2-8B-A1B")),
    ("fla-hub/gla-", 32000, HF.format("fla-hub/gla-1.3B-100B") + " (Llama-2 tokenizer)"),
)

VOCAB_BY_TYPE: dict[str, tuple[int, str]] = {
    # Megatron-LM / Primus tokenizer_type -> (vocabulary, source): the family's tokenizer when no model id is given
    "GPT2BPETokenizer": (50257, "GPT-2's byte-pair vocabulary (Radford et al. 2019, 50 257 tokens)"),
    "Llama2Tokenizer": (32000, f"{ARCHS} Llama2"),
    "Llama3Tokenizer": (128256, f"{ARCHS} Llama3"),
    "Llama4Tokenizer": (202048, HF.format("meta-llama/Llama-4-Scout-17B-16E")),
    "MixtralTokenizer": (32000, f"{ARCHS} Mixtral"),
    "DeepSeekV2Tokenizer": (102400, HF.format("deepseek-ai/DeepSeek-V2")),
    "DeepSeekV3Tokenizer": (129280, f"{ARCHS} DeepSeek-V3"),
    "DeepSeekV4Tokenizer": (129280, "Primus deepseek_v4_flash.yaml vocab_size"),
    "KimiK2Tokenizer": (163840, f"{ARCHS} Kimi-K2"),
    "Lfm2Tokenizer": (65536, HF.format("LiquidAI/LFM2-8B-A1B")),
}

ASSUMED_VOCAB = 131072
"""Vocabulary projected when the tokenizer is unknown and ``vocab_size`` unset: Primus's NullTokenizer default
(``primus/backends/megatron/patches/args/mock_data_patches.py``, ``DEFAULT_NULL_TOKENIZER_VOCAB_SIZE``)."""
PRIMUS_MOCK_VOCAB = 131072
"""What a Primus run with ``mock_data: true`` and no ``vocab_size`` trains with: the same patch forces
``tokenizer_type: NullTokenizer`` and sets ``vocab_size`` to 131 072."""

NULL_TOKENIZER_EOD = 1
"""Megatron's NullTokenizer adds an end-of-document id after its ``vocab_size`` ids (megatron-core
tokenizers/text/libraries/null_tokenizer.py: ``vocab_size`` returns ``vocab_size + 1``)."""

_BY_LENGTH = tuple(sorted(VOCAB_BY_PREFIX, key=lambda row: -len(row[0])))


def vocab_size_of(tokenizer_model: str | None, tokenizer_type: str | None = None) -> int | None:
    """The unpadded vocabulary of a known tokenizer id (else of its ``tokenizer_type``), or ``None``."""
    if tokenizer_model:
        for prefix, vocab, _source in _BY_LENGTH:
            if tokenizer_model.startswith(prefix):
                return vocab
    if tokenizer_type and tokenizer_type in VOCAB_BY_TYPE:
        return VOCAB_BY_TYPE[tokenizer_type][0]
    return None
