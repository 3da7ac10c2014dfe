"""Fine-tuning rows of a measurements CSV (LoRA, SFT) -> what they run, as recipe keys.

    >>> finetune_of(row)          # FineTune(lora_rank=16, lora_targets=("linear_qkv", "linear_proj"), ...)

A LoRA row (``shared/validation/mlperf_training.csv``: MLPerf's ``llama2_70b_lora``) runs the base model frozen with
rank-r adapters on the linears it names: the projection prices it as such (``model.lora``: no weight-gradient
GEMMs for the frozen base, two skinny adapter GEMMs per target, optimizer state for the adapters only). An SFT row
(supervised fine-tuning of every parameter) runs the pre-training step on packed sequences: the same cost.
The tokens a row counts are ``samples x seq_len`` (packed sequences, padding included: the convention
``mlperf_training.csv`` states), which is what the projection's tokens/s/GPU counts too.

What a row states is read from its ``extra_flags`` and ``notes``; what it does not state is filled from the benchmark
it names, and said in the row's assumptions:

- MLPerf Training's ``llama2_70b_lora`` benchmark: LoRA rank 16, alpha 32 on the attention's QKV and output
  projections (the reference implementation's ``target_modules``, mlcommons/training ``llama2_70b_lora``; every
  submission's shipped config, ``mlperf_training.csv`` README).
- ``recompute=full/block/21 layers``: Megatron's ``recompute_granularity`` / ``recompute_method`` /
  ``recompute_num_layers`` (NeMo's ``activations_checkpoint_*``), as the AMD submissions' configs state them.
- "fp8 params": the frozen base weights are stored in FP8 (Transformer Engine ``fp8_model_init``; Megatron's
  ``--fp8-param-gather``): no bf16 copy of them.
- "FP8_DPA=1" (FP8 dot-product attention) is not modelled: attention is projected in BF16 and the row says so.
Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

LORA_MARKERS = ("lora", "peft")
SFT_MARKERS = ("sft", "supervised fine-tun", "full fine-tun")

BENCHMARK_LORA = {"llama2_70b_lora": (16, ("linear_qkv", "linear_proj"))}
"""Benchmarks whose LoRA setting is fixed by their rules: name in the row's source / notes -> (rank, targets).
MLPerf Training ``llama2_70b_lora``: rank 16, alpha 32, adapters on the attention's QKV and output projections
(mlcommons/training ``llama2_70b_lora`` reference, ``lora_target_modules`` qkv + o_proj; read from every shipped
config: shared/validation/README.md, ``mlperf_training.csv``)."""

_TARGET_WORDS = (
    (re.compile(r"\bqkv\b|linear_qkv|q_proj|attention_qkv"), "linear_qkv"),
    (re.compile(r"\bproj\b|linear_proj|o_proj|attention_dense"), "linear_proj"),
    (re.compile(r"\bfc1\b|linear_fc1|up_proj|gate_proj"), "linear_fc1"),
    (re.compile(r"\bfc2\b|linear_fc2|down_proj"), "linear_fc2"),
)
"""Target names as rows write them (Megatron's, Hugging Face's, NeMo's) -> megatron-core's linear names."""

_RANK = re.compile(r"\blora\s*(?:r|rank|dim)\s*=\s*(\d+)|\blora[^;|]*?\brank\s*(\d+)", re.IGNORECASE)
_TARGETS = re.compile(r"\blora\b[^;|]*?\bon\s+(?:the\s+)?(?:attention\s*)?\(([^)]*)\)", re.IGNORECASE)
_RECOMPUTE = re.compile(r"\brecompute\s*=\s*(full|selective)(?:/(uniform|block))?(?:/(\d+)\s*layers?)?",
                        re.IGNORECASE)


@dataclass(frozen=True, kw_only=True)
class FineTune:
    """What a fine-tuning row runs beyond the pre-training step its columns describe."""

    kind: str
    """``lora`` or ``sft``."""
    lora_rank: int = 0
    lora_targets: tuple[str, ...] = ()
    recompute: tuple[str, str | None, int | None] | None = None
    """(granularity, method, layers) the row states, ``None`` when it states none."""
    fp8_params: bool = False
    assumptions: tuple[str, ...] = ()


def _text(row: dict[str, str]) -> str:
    return " ".join((row.get("source") or "", row.get("notes") or "", row.get("extra_flags") or ""))


def is_finetune(row: dict[str, str]) -> bool:
    """Whether a row is a fine-tuning run (LoRA / PEFT / SFT)."""
    text = _text(row).lower()
    return any(m in text for m in LORA_MARKERS) or any(re.search(rf"\b{m}\b", text) for m in SFT_MARKERS)


def finetune_of(row: dict[str, str]) -> FineTune | str:
    """The fine-tuning a row describes, or a sentence saying why it cannot be projected (rank or targets missing)."""
    text = _text(row)
    lowered = text.lower()
    assumptions: list[str] = []
    recompute = None
    match = _RECOMPUTE.search(row.get("extra_flags") or "")
    if match:
        granularity, method, layers = match.group(1).lower(), match.group(2), match.group(3)
        recompute = (granularity, method.lower() if method else None, int(layers) if layers else None)
    fp8_params = "fp8 params" in lowered or "fp8_param" in lowered
    if not any(m in lowered for m in LORA_MARKERS):
        return FineTune(kind="sft", recompute=recompute, fp8_params=fp8_params,
                        assumptions=("SFT: every parameter trains on packed sequences (the pre-training step)",))
    benchmark = next((name for name in BENCHMARK_LORA if name in lowered), None)
    rank_match = _RANK.search(text)
    rank = int(rank_match.group(1) or rank_match.group(2)) if rank_match else 0
    targets: tuple[str, ...] = ()
    target_match = _TARGETS.search(text)
    if target_match:
        words = target_match.group(1).lower()
        targets = tuple(name for pattern, name in _TARGET_WORDS if pattern.search(words))
    if benchmark:
        rule_rank, rule_targets = BENCHMARK_LORA[benchmark]
        if not rank:
            rank = rule_rank
            assumptions.append(f"LoRA rank {rule_rank} ({benchmark} rules; not stated by the row)")
        if not targets:
            targets = rule_targets
            assumptions.append(f"LoRA targets {', '.join(rule_targets)} ({benchmark} rules; not stated by the row)")
    if not rank:
        return "LoRA rank not stated (write e.g. 'LoRA r=16' in extra_flags)"
    if not targets:
        return "LoRA target modules not stated (write e.g. 'LoRA r=16 on attention (qkv+proj)' in extra_flags)"
    if re.search(r"fp8_dpa\s*=\s*1", lowered):
        assumptions.append("FP8 attention (FP8_DPA=1) projected as BF16 attention (FP8 attention is not modelled)")
    return FineTune(kind="lora", lora_rank=rank, lora_targets=targets, recompute=recompute, fp8_params=fp8_params,
                    assumptions=tuple(assumptions))


def finetune_keys(tune: FineTune, precision: str) -> dict[str, Any]:
    """A fine-tuning row's recipe keys: Primus's SFT trainer (``stage: sft``, the trainer that applies LoRA) with its
    ``lora`` block, the recompute the row states, FP8 parameters (``fp8_param_gather``)."""
    keys: dict[str, Any] = {}
    if tune.kind == "lora":
        keys.update(stage="sft", lora={"enabled": True, "dim": tune.lora_rank,
                                       "target_modules": list(tune.lora_targets)})
    if tune.recompute is not None:
        granularity, method, layers = tune.recompute
        keys["recompute_granularity"] = granularity
        if granularity == "full":
            keys.update(recompute_method=method or "uniform", recompute_num_layers=layers or 1)
    if tune.fp8_params and precision == "fp8":
        keys["fp8_param_gather"] = True
    return keys


__all__ = ["BENCHMARK_LORA", "FineTune", "finetune_keys", "finetune_of", "is_finetune"]
