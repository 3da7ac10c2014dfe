"""A recipe's hybrid Mamba model (``model_type: mamba``): megatron-core 0.16.1's ``MambaModel`` with its
``mamba_stack_spec`` (Primus's ``models/mamba/mamba_layer_specs.py`` copy builds the same stack).

``resolve_all`` calls ``hybrid_model`` on the resolved ``ModelSpec``: the layer pattern from
``hybrid_override_pattern`` / ``hybrid_attention_ratio`` / ``hybrid_mlp_ratio`` (``model.layers.allocate_layers``),
the mixer sizes from ``mamba_*``, and the problems megatron-core would raise (head / group splits over TP and CP,
interleaved pipelines, an uneven pipeline split). Primus's ``HybridStack`` specs project (``HYBRID_STACK_MIXERS``:
its allocation, its ``M`` layers the kind of its mixer: Zebra-Llama's Mamba-2 mixer of the spec's expand, gated
DeltaNet, Kimi delta attention). Refused with a sentence (``HYBRID_SPEC_REFUSALS``): any other ``HybridStack`` spec.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from primus_ext.errors import Problem
from primus_ext.recipe.args import ArgReader
from primus_ext.specs import ExecutionSpec, ModelSpec

HYBRID_MODEL_TYPE = "mamba"
"""The Primus ``model_type`` that builds megatron-core's ``MambaModel`` (Primus models/megatron/mamba_base.yaml)."""
HYBRID_KEYS = ("is_hybrid_model", "hybrid_override_pattern", "hybrid_attention_ratio", "hybrid_mlp_ratio",
               "mamba_state_dim", "mamba_head_dim", "mamba_num_groups", "mamba_num_heads")
"""The Megatron arguments this module reads (megatron-core TransformerConfig / MambaModel names)."""

HYBRID_STACK_MIXERS = {
    "hybrid_stack_spec": "M",
    "mamba_hybrid_stack_spec_no_te": "M",
    "gdn_hybrid_stack_spec": "G",
    "gdn_hybrid_stack_spec_no_te": "G",
    "kda_hybrid_stack_spec": "K",
    "kda_hybrid_stack_spec_no_te": "K",
}
"""Primus ``HybridStack`` specs that project (primus/backends/megatron/core/models/hybrid/
hybrid_mamba_mla_layer_specs.py at Primus HEAD): spec name -> the symbol of the kind its mixer layer (the pattern's
``M``) is. ``hybrid_stack_spec`` / ``mamba_hybrid_stack_spec_no_te``: megatron-core's ``MambaLayer``
(``Mamba2HybridLayer`` adapts its constructor only) with a ``MambaMixer`` of the expand
``HYBRID_STACK_MAMBA_EXPAND`` gives
(``model.kinds.mamba``; the no-TE spec's layer has no pre-norm, priced with megatron-core's fused one: hidden_size
parameters a layer more). ``gdn_*``: a ``GatedDeltaNetLayer`` (pre-norm + megatron-core's ``GatedDeltaNet`` copy:
``model.kinds.gated_delta``). ``kda_*``: a ``KimiDeltaAttentionLayer`` (``model.kinds.kimi_delta``). Their ``-`` is an
``MLPLayer`` as megatron-core's; their ``*`` MLA with extra q / kv
norms (not priced: a warning)."""

HYBRID_STACK_MAMBA_EXPAND = {"hybrid_stack_spec": 1, "mamba_hybrid_stack_spec_no_te": 2}
"""The ``MambaMixer`` ``expand`` each Mamba ``HybridStack`` spec passes (``params={"expand": ...}`` in
hybrid_mamba_mla_layer_specs.py at Primus HEAD): ``d_inner = expand x hidden_size``, the heads
``d_inner / mamba_head_dim`` unless ``mamba_num_heads`` is set (megatron-core 0.16.1 ssm/mamba_mixer.py). Primus's
``mamba_expand`` key is read by its conversion tools only, not by the mixer."""

HYBRID_SPEC_REFUSALS = (
    (("gdn_", "gated_delta"), "gated delta net (linear attention) mixers of this spec are not modelled"),
    (("kda_", "kimi_delta"), "Kimi delta attention (linear attention) mixers of this spec are not modelled"),
    (("hybrid_mamba_mla_layer_specs", "hybridstack", "hybrid_stack_spec"),
     "this Primus HybridStack spec (hybrid_mamba_mla_layer_specs) is not one primus-ext models (those it models: "
     + ", ".join(HYBRID_STACK_MIXERS) + ")"),
)
"""(markers in the ``spec`` argument, sentence): hybrid layer specs the projection refuses."""


def spec_refusal(spec: Any) -> str | None:
    """Why the recipe's ``spec`` (a [module, name] pair or a string) is not a modelled hybrid stack, or ``None``."""
    if stack_mixer(spec):
        return None
    text = " ".join(map(str, spec)) if isinstance(spec, list | tuple) else str(spec or "")
    lowered = text.lower()
    for markers, sentence in HYBRID_SPEC_REFUSALS:
        if any(marker in lowered for marker in markers):
            return sentence
    return None


def _spec_name(spec: Any) -> str:
    """The spec's name: the last of a [module, name] pair, or the string itself ("" when neither)."""
    name = spec[-1] if isinstance(spec, list | tuple) and spec else spec
    return name if isinstance(name, str) else ""


def stack_mixer(spec: Any) -> str:
    """The symbol of the mixer kind of a projecting Primus ``HybridStack`` spec (``HYBRID_STACK_MIXERS``), else ""."""
    return HYBRID_STACK_MIXERS.get(_spec_name(spec), "")


def hybrid_stack_pattern(num_layers: int, attention_ratio: float) -> str:
    """Primus ``HybridStack.allocate_layers`` (hybrid_block.py at Primus HEAD): without a layer pattern, the stack
    allocates ``num_layers / 2`` mixer / attention layers by the attention ratio, each followed by an MLP (its
    ``hybrid_mlp_ratio`` ignored), not megatron-core's ``allocate_layers``."""
    attention = int(num_layers // 2 * attention_ratio)
    mixers = num_layers // 2 - attention
    if attention == 0:
        return "M-" * (num_layers // 2)
    if attention_ratio <= 0.5:
        return ("*-" + "M-" * (mixers // attention)) * attention + "M-" * (mixers % attention)
    return "*-" * (attention - mixers) + "*-M-" * mixers


def spec_problems(args: Any) -> list[Problem]:
    """A refused hybrid spec of a ``model_type: mamba`` recipe as a problem (empty when modelled)."""
    why = spec_refusal(args.get("spec"))
    if why is None:
        return []
    return [Problem(path="spec", value=args.get("spec"),
                    message=f"{why}: primus-ext projects GPT-style megatron-core models (dense, MoE, MLA) and "
                            "megatron-core hybrid Mamba stacks only, so no figure is given for this recipe",
                    fix="project a recipe on megatron-core's mamba_stack_spec (or a GPT-style one)")]


def hybrid_model(a: ArgReader, model: ModelSpec) -> ModelSpec:
    """``model`` with its hybrid layer pattern and Mamba sizes; problems go to ``a``."""
    from primus_ext.model import hybrid
    from primus_ext.model.layers import symbols

    attention = a.float("hybrid_attention_ratio") or 0.0
    mlp = a.float("hybrid_mlp_ratio") or 0.0
    override = a.raw("hybrid_override_pattern")
    if override is not None and not isinstance(override, str):
        a.bad("hybrid_override_pattern", f"must be a string of {' '.join(symbols())}",
              fix="e.g. hybrid_override_pattern: M*M-")
        override = None
    mtp_pattern = ""
    if override is not None and "/" in override:
        override, mtp_pattern = _mtp_split(a, model, override)
    try:
        pattern = _layer_pattern(a, model, attention, mlp, override)
    except hybrid.HybridPatternError as err:
        key = "hybrid_override_pattern" if override else "hybrid_attention_ratio"
        a.bad(key, str(err), fix=f"give one symbol ({' '.join(symbols())}) per layer, counts matching the ratios when "
                                 "both are set")
        pattern = "M" * max(1, model.num_layers)
    head_dim = a.int("mamba_head_dim") or hybrid.MAMBA_HEAD_DIM
    expand = HYBRID_STACK_MAMBA_EXPAND.get(_spec_name(a.raw("spec")), hybrid.MAMBA_EXPAND)
    try:
        heads = hybrid.mamba_num_heads(model.hidden_size, head_dim, a.int("mamba_num_heads"), expand=expand)
    except hybrid.HybridPatternError as err:
        a.bad("mamba_head_dim", str(err), fix="set mamba_num_heads, or a mamba_head_dim dividing 2 x hidden_size")
        heads = 1
    a.int("mamba_state_dim")
    a.bool("is_hybrid_model")
    if mtp_pattern and not set(mtp_pattern) <= set(pattern):
        a.bad("hybrid_override_pattern", f"MTP layers {mtp_pattern!r} hold a layer kind the decoder pattern lacks",
              fix="use MTP layers of the decoder's symbols")
        mtp_pattern = ""
    return replace(model, hybrid_layer_pattern=pattern, mamba_num_heads=heads, mamba_head_dim=head_dim,
                   kind_dims=kind_dims(a, pattern), mtp_layer_pattern=mtp_pattern,
                   mamba_num_groups=a.int("mamba_num_groups") or hybrid.MAMBA_NUM_GROUPS,
                   mamba_state_dim=a.int("mamba_state_dim") or hybrid.MAMBA_STATE_DIM,
                   moe_layer_pattern=_routed(pattern) if model.num_experts else ())


def _mtp_split(a: ArgReader, model: ModelSpec, override: str) -> tuple[str, str]:
    """(decoder pattern, one MTP depth's pattern) of ``main/mtp/mtp...`` (Megatron-LM @d98e8a64
    models/hybrid/hybrid_layer_allocation.py ``parse_hybrid_pattern``: "/" introduces one MTP depth's layers, every
    depth's the same); its depth count must be ``mtp_num_layers`` (hybrid_model.py builds MTP when both are set)."""
    main, *depths = override.split("/")
    if not any(depths):
        return main, ""
    if any(part != depths[0] for part in depths):
        a.bad("hybrid_override_pattern", f"MTP patterns after '/' differ ({', '.join(map(repr, depths))})",
              fix="repeat one MTP pattern per depth, e.g. M*M*/*E/*E")
        return main, ""
    if model.mtp_num_layers != len(depths):
        a.bad("mtp_num_layers", f"{model.mtp_num_layers}, but hybrid_override_pattern gives {len(depths)} MTP "
              "depths after '/'", fix=f"set mtp_num_layers: {len(depths)}")
        return main, ""
    return main, depths[0]


def _layer_pattern(a: ArgReader, model: ModelSpec, attention: float, mlp: float, override: str | None) -> str:
    """megatron-core's ``allocate_layers``; under a Primus ``HybridStack`` spec (``stack_mixer``) the pattern as
    given (the ratios dropped: hybrid_block.py), else its own allocation, its ``M`` layers its mixer kind's."""
    from primus_ext.model.layers import allocate_layers

    mixer = stack_mixer(a.raw("spec"))
    if not mixer:
        return allocate_layers(model.num_layers, attention, mlp, override)
    pattern = (allocate_layers(model.num_layers, override=override) if override
               else hybrid_stack_pattern(model.num_layers, attention)).replace("M", mixer)
    if "*" in pattern and model.multi_latent_attention:
        a.warnings.append("Primus HybridStack attention layers: MLA with extra q / kv RMSNorms "
                          "(hybrid_mamba_mla_layer_specs); projected as megatron-core's MLA without them")
    if mixer == "K" and not a.bool("use_fla_triton_kda"):
        a.warnings.append("Kimi delta attention without use_fla_triton_kda runs Primus's pure-PyTorch chunked rule "
                          "(gradient-checkpointed, a Python loop over each chunk's positions: "
                          "kimi_delta_attention.py _torch_chunk_kda_fwd); projected at flash-linear-attention's "
                          "chunk_kda cost, far faster than that path runs")
    return pattern


def kind_dims(a: ArgReader, pattern: str) -> tuple[tuple[str, Any], ...]:
    """(kind, its own record) for each kind ``pattern`` places that reads keys of its own (``Kind.read_dims``); the
    values megatron-core refuses (``Kind.check_dims``) are problems of ``a``, a record of defaults alone a warning."""
    from primus_ext.model.kinds.registry import get_kind, pattern_kinds

    found = []
    for name in pattern_kinds(pattern).values():
        kind = get_kind(name)
        dims = kind.read_dims(a)
        if dims is not None and all(a.raw(key) is None for key in kind.recipe_keys()):
            defaults = ", ".join(f"{key}={getattr(dims, key)}" for key in kind.recipe_keys())
            a.warnings.append(f"layer kind {name}: the recipe sets none of its keys; projected with megatron-core's "
                              f"defaults, as Megatron builds it ({defaults})")
        if dims is not None:
            for key, why, fix in kind.check_dims(dims):
                a.bad(key, why, fix=fix)
            found.append((name, dims))
    return tuple(found)


def _routed(pattern: str) -> tuple[bool, ...]:
    """Per layer: its kind routes tokens to experts (``Kind.routed_experts``: megatron-core's ``E``)."""
    from primus_ext.model.kinds.registry import get_kind, symbol_kinds

    kinds = symbol_kinds()
    routed = {s: get_kind(kinds[s]).routed_experts for s in set(pattern) if s in kinds}
    return tuple(routed.get(c, False) for c in pattern)


MAMBA_RECOMPUTE = ("recompute_granularity full: megatron-core's MambaStack has no layer-checkpointing path "
                   "(TransformerBlock's _checkpointed_forward); projected without recompute")
"""What full recompute of a hybrid Mamba stack is told (a stack read from another block says its own:
``recipe.stacks.recompute_note``)."""


def hybrid_problems(model: ModelSpec, execution: ExecutionSpec,
                    recompute_note: str = MAMBA_RECOMPUTE) -> tuple[list[Problem], list[str]]:
    """(problems, warnings) of a hybrid model under ``execution``: what megatron-core 0.16.1 asserts
    (ssm/mamba_mixer.py, mamba_context_parallel.py, mamba_block.py) and what the projection does not price
    (``recompute_note``: the warning of full recompute, which the block the stack was read from decides)."""
    from primus_ext.model.hybrid import HybridPatternError, stage_patterns
    from primus_ext.model.kinds.registry import get_kind, pattern_kinds
    from primus_ext.model.pipeline.registry import resolve_schedule
    from primus_ext.model.recompute import block_layers

    problems: list[Problem] = []
    warnings: list[str] = []
    for kind in pattern_kinds(model.hybrid_layer_pattern).values():
        found = get_kind(kind).split_problem(model, execution)
        if found:
            problems.append(Problem(path="tensor_model_parallel_size", value=execution.tp, message=found[0],
                                    fix=found[1]))
    try:
        stage_patterns(model.hybrid_layer_pattern, execution.pp, first=execution.decoder_first_pipeline_num_layers,
                       last=execution.decoder_last_pipeline_num_layers,
                       vpp=execution.virtual_pipeline_model_parallel_size)
    except HybridPatternError as err:
        problems.append(Problem(path="pipeline_model_parallel_size", value=execution.pp, message=str(err),
                                fix="choose a PP dividing num_layers, without virtual stages"))
    for key in ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split"):
        if getattr(execution, key):
            problems.append(Problem(path=key, value=True, message="megatron-core's MambaStack splits the layer "
                                    "pattern by counts alone (_select_layers_for_pipeline_parallel)",
                                    fix=f"set {key}: false"))
    if execution.pipeline_model_parallel_layout:
        problems.append(Problem(path="pipeline_model_parallel_layout", value=execution.pipeline_model_parallel_layout,
                                message="megatron-core's MambaStack splits by layer counts, not by a layout",
                                fix="drop pipeline_model_parallel_layout"))
    schedule = resolve_schedule(execution.pipeline_schedule, execution.pp,
                                execution.virtual_pipeline_model_parallel_size)
    if schedule.fixed_chunks and execution.pp > 1:
        problems.append(Problem(path="pipeline_schedule", value=schedule.name,
                                message=f"{schedule.label} needs two model chunks per rank; megatron-core's MambaStack "
                                        "builds one per pipeline rank", fix="use 1F1B or ZB-H1 / ZB-H2"))
    if model.mtp_num_layers and not model.mtp_layer_pattern:
        problems.append(Problem(path="mtp_num_layers", value=model.mtp_num_layers,
                                message="a hybrid Mamba model's MTP layers are given after '/' in its layer pattern "
                                        "(megatron-core parse_hybrid_pattern); this one gives none",
                                fix="append /<layers> once per depth to hybrid_override_pattern (e.g. /*E/*E), or "
                                    "set mtp_num_layers: 0"))
    if execution.recompute_granularity == "full" and block_layers(execution) != 0:  # block of 0 layers: none anyway
        warnings.append(recompute_note)
    return problems, warnings
