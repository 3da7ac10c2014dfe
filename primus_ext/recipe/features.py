"""Spec fields that Megatron, megatron-core or Primus settle from several arguments (one reader each).

Used by ``resolve``; each function reads raw arguments through an ``ArgReader`` (bad values become its
problems) and returns the value of one spec field.
"""

from __future__ import annotations

from typing import Any

from primus_ext.model.lora import TARGETS as LORA_TARGETS
from primus_ext.recipe.args import ArgReader


def window_skip(a: ArgReader, num_layers: int) -> int:
    """``window_attn_skip_freq`` as the period N of "every N-th layer attends fully" (0: every layer windowed).

    megatron-core 0.16.1 transformer/utils.py ``is_layer_window_attention``: an int N windows layer l (1-based)
    iff l % N != 0; a list gives each layer's flag (1 = windowed), e.g. GPT-OSS's [1, 0, 1, 0, ...] = N 2.
    A list is modelled when it repeats a period with one full-attention layer (any position: the per-layer
    cost averages the same); other patterns are a problem."""
    value = a.raw("window_attn_skip_freq")
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return a.int("window_attn_skip_freq", minimum=0) or 0
    if isinstance(value, str):
        try:
            value = [int(v) for v in value.strip("[]() ").split(",") if v.strip()]
        except ValueError:
            value = None
    flags = value if isinstance(value, list | tuple) else None
    if flags is None or not all(v in (0, 1) and not isinstance(v, float) for v in flags):
        a.bad("window_attn_skip_freq", "expected an integer N or a list of 0/1 flags, one per layer",
              fix="write e.g. window_attn_skip_freq: 2, or [1, 0, 1, 0, ...]")
        return 0
    if len(flags) != num_layers:
        a.bad("window_attn_skip_freq", f"list has {len(flags)} flags for {num_layers} layers (megatron-core indexes "
              "it by layer number)", fix=f"give one flag per layer ({num_layers})")
        return 0
    if all(flags):
        return 0
    full = [i for i, f in enumerate(flags) if not f]
    period = full[1] - full[0] if len(full) > 1 else len(flags)
    if len(flags) % period == 0 and all(flags[i] == flags[i % period] for i in range(len(flags))) \
            and flags[:period].count(0) == 1:
        return period
    a.bad("window_attn_skip_freq", "a list whose windowed / full pattern does not repeat with one full-attention "
          "layer per period is not modelled", fix="use a periodic pattern such as [1, 0, 1, 0, ...]")
    return 0


def loss_impl(a: ArgReader) -> str:
    """``cross_entropy_fusion_impl`` as megatron-core uses it: only with ``cross_entropy_loss_fusion`` on."""
    impl = a.choice("cross_entropy_fusion_impl", ("native", "te"), "native") or "native"
    return impl if a.bool("cross_entropy_loss_fusion") else "native"  # unfused loss: fp32 exp(logits) too


def dispatcher(a: ArgReader) -> str:
    """The token dispatcher, as Megatron and Primus settle it before the model is built.

    ``moe_enable_deepep`` needs ``flex`` (megatron-core refuses another). Primus-Turbo's DeepEP
    (``use_turbo_deepep``, or ``turbo_sync_free_moe_stage`` >= 2, with ``enable_primus_turbo``: Primus
    patches/turbo/moe_dispatcher_patches.py and patches/args/rocm_arg_validation.py) sets ``flex`` itself."""
    value = a.choice("moe_token_dispatcher_type", ("alltoall", "allgather", "flex", "alltoall_seq"), "allgather")
    a.choice("moe_flex_dispatcher_backend", ("deepep", "hybridep", "ncclep"))
    turbo = a.bool("enable_primus_turbo") and (
        a.bool("use_turbo_deepep") or (a.int("turbo_sync_free_moe_stage", minimum=0, maximum=3) or 0) >= 2)
    if turbo:
        return "flex"
    if a.bool("moe_enable_deepep") and value != "flex":
        # megatron-core transformer_config.py (0.16, Primus's pinned d3528a2): "DeepEP backend is only
        # supported with flex token dispatcher."
        a.bad("moe_enable_deepep", f"DeepEP needs the flex token dispatcher, not {value or 'allgather'} "
              "(megatron-core refuses it)", fix="set moe_token_dispatcher_type: flex")
    return "alltoall" if value == "alltoall_seq" else value or "allgather"


def wire_dtypes(a: ArgReader) -> dict[str, str]:
    """megatron-core's ``moe_dispatch_fwd_dtype`` / ``moe_combine_bwd_dtype`` (bf16 or mxfp8 on the wire), with its
    rules (transformer_config.py ``__post_init__``): the ``ncclep`` flex backend, ``use_transformer_engine_op_fuser``
    and ``moe_grouped_gemm``."""
    out = {key: a.choice(key, ("bf16", "mxfp8"), "bf16") or "bf16"
           for key in ("moe_dispatch_fwd_dtype", "moe_combine_bwd_dtype")}
    quantised = [key for key, value in out.items() if value != "bf16"]
    if quantised:
        if a.raw("moe_token_dispatcher_type") != "flex" or a.raw("moe_flex_dispatcher_backend") != "ncclep":
            a.bad(quantised[0], "megatron-core quantises the all-to-all payload with the 'ncclep' flex dispatcher "
                  "backend only", fix="set moe_token_dispatcher_type: flex and moe_flex_dispatcher_backend: ncclep")
        if not (a.bool("use_transformer_engine_op_fuser") and a.bool("moe_grouped_gemm")):
            a.bad(quantised[0], "megatron-core needs use_transformer_engine_op_fuser and moe_grouped_gemm for an "
                  "mxfp8 payload (only the fused grouped GEMM consumes it)",
                  fix="set use_transformer_engine_op_fuser: true and moe_grouped_gemm: true")
    return out


def recompute_layer_ids(a: ArgReader, num_layers: int, mtp_layers: int) -> tuple[int, ...]:
    """Primus's ``recompute_layer_ids`` (a list, or a comma-separated string), sorted and de-duplicated as
    Primus's ``validate_specified_recompute_layers`` does; ids beyond the decoder and MTP layers are problems."""
    value = a.raw("recompute_layer_ids")
    if value is None:
        return ()
    if isinstance(value, str):
        items: Any = [v.strip() for v in value.split(",") if v.strip()]
    elif isinstance(value, int) and not isinstance(value, bool):
        items = [value]
    else:
        items = value
    try:
        parsed = [int(v) for v in items if not isinstance(v, bool | float)] if isinstance(items, list) else None
    except (TypeError, ValueError):
        parsed = None
    ids = sorted(set(parsed)) if parsed is not None and len(parsed) == len(items) else None
    if not ids:
        a.bad("recompute_layer_ids", "expected a non-empty list of layer indices", fix="write e.g. [0, 1, 2]")
        return ()
    top = num_layers + mtp_layers - 1
    bad = [i for i in ids if not 0 <= i <= top]
    if bad:
        a.bad("recompute_layer_ids", f"ids {bad[:5]} outside 0..{top} (0..{num_layers - 1} are decoder layers"
              + (f", then {mtp_layers} MTP depths" if mtp_layers else "") + ")",
              fix=f"use layer indices 0..{top}")
        return ()
    if ids[-1] >= num_layers:
        a.warnings.append(f"recompute_layer_ids {[i for i in ids if i >= num_layers]} are MTP depths: their recompute "
                          "is not modelled (projected without it)")
    return tuple(ids)


def lora(a: ArgReader) -> tuple[int, tuple[str, ...]]:
    """(rank, target linears) of Primus's ``lora`` block; (0, ()) when absent or ``enabled: false``."""
    block = a.raw("lora")
    if block is None:
        return 0, ()
    if not isinstance(block, dict):
        a.bad("lora", "expected a mapping (enabled, dim, alpha, target_modules)",
              fix="write lora: {enabled: true, dim: 32}")
        return 0, ()
    if not block.get("enabled"):
        return 0, ()
    if not (a.primus and a.args.get("stage") == "sft"):
        # Primus applies LoRA in MegatronSFTTrainer._init_lora only, the trainer its registry gives stage "sft"
        # (backends/megatron/__init__.py; core/runtime/train_runtime.py picks the trainer by ``stage``)
        a.warnings.append("lora.enabled is set but only Primus's SFT trainer (stage: sft) applies LoRA: this run "
                          "trains every weight and is projected so")
        return 0, ()
    rank = block.get("dim", 32)  # sft_trainer.yaml default
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        a.bad("lora", f"lora.dim must be a positive integer, got {rank!r}", fix="write lora.dim: 32")
        return 0, ()
    targets = block.get("target_modules") or list(LORA_TARGETS)
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        a.bad("lora", "lora.target_modules must be a list of module names",
              fix=f"choose from {', '.join(LORA_TARGETS)}")
        return 0, ()
    names = {t.rsplit(".", 1)[-1].strip("*") for t in targets}
    unknown = sorted(names - set(LORA_TARGETS))
    if unknown:
        a.bad("lora", f"lora.target_modules {unknown} are not modelled (projected targets: {', '.join(LORA_TARGETS)})",
              fix=f"target a subset of {', '.join(LORA_TARGETS)}")
        return 0, ()
    return rank, tuple(t for t in LORA_TARGETS if t in names)
