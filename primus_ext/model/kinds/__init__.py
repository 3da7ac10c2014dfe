"""Layer kinds as objects: one class per kind says what a layer of it holds, costs, saves and communicates.

Calculon models a network as ``Layer`` subclasses; here each ``RankShape.kind`` ("dense", "moe", "embedding",
"output"; a hybrid Mamba model's "mamba", "hybrid_attention", "hybrid_mlp", "hybrid_moe": ``kinds.mamba``,
``kinds.hybrid``, ``model.hybrid``) names a registered ``Kind`` instance, and the modules above the registry ask it
instead of branching on the name::

    from primus_ext.model.kinds import get_kind
    get_kind(shape.kind).params(shape)          # parameters one rank holds
    get_kind("moe").comm(shape, True).pairs     # (("attn", "tp"), ("etp", "etp"), ...)

Adding a kind (e.g. a Mamba-2 mixer layer ``"mamba"``)
------------------------------------------------------
1. Subclass ``Kind`` in a module of this package; set ``name`` and the traits (``base.TRAITS``):
   ``decoder_layer`` (one of ``num_layers``), ``recomputable`` (Megatron's full / selective recompute applies),
   ``attention`` (self-attention: CP exchange, sliding windows, core-attention seconds), ``layer_graph``
   (captured by per-layer CUDA graphs), ``lora_adapters`` (LoRA wraps its linears), ``takes_sequence_split``
   (input split over TP under sequence parallelism), ``symbol`` (its letter in a hybrid layer pattern, step 5).
2. Implement the hooks (all pure, per rank, per micro-batch; ``shape`` is the kind's ``RankShape``):

   - ``params(shape, impl=)`` -> int, parameter elements one rank holds; ``expert_params`` / ``router_params``
     -> int, the parts of it in expert-parallel groups / in routers (default 0); ``expert_split`` ->
     (EP, ETP) its weights are split over (default (1, TP)).
   - ``roofline(parts, shape, gpu)`` -> None: add seconds to ``roofline._Parts`` with ``parts.gemm(name,
     (fwd_s, dgrad_s, wgrad_s))`` and ``parts.other(name, fwd_s, bwd_s)``; names shared with
     ``analytic._SELECTIVE`` are what selective recompute re-runs. ``op_sac_gemms_s`` -> seconds of each GEMM
     torchtitan's op-level checkpointing re-runs, or ``None`` (half the forward GEMMs). ``overhead_s`` ->
     seconds per pass beyond FLOPs and launches (default 0). ``fwd_flops_estimate`` -> forward FLOPs (rough,
     to size CPU measurements).
   - ``saved(shape, impl)`` -> {name: bytes} saved for backward without recompute (``activations.ActivationImpl``
     says TE or local); ``saved_selective(shape, impl, parts)`` -> the same under selective recompute.
   - ``comm(shape, sequence_parallel)`` -> ``KindComm``: the named TP pairs (group ``"tp"`` / ``"etp"``), single
     forward / backward collectives over TP, the parts full recompute re-runs, whether it dispatches tokens
     over EP. Each collective moves ``tokens x hidden`` activations; ``projection.comm`` times them.
3. ``KINDS = (MyKind(),)`` at the bottom of the module: the registry imports every module of this package and
   registers its ``KINDS``. The module imports ``base`` and the leaves of the model layer only (``rank_shape``,
   ``params``, ``roofline``, ``macs``, ``hybrid``, ``memory.activations``: pure formulas that look no kind up), never
   the registry or a module above it (``layers``, ``analytic``, ``flops``, ``memory.saved``): ``tests/test_layers.py``
   finds the circle. A kind defined outside this package (a plugin's, a test's) calls ``register(MyKind())``.
4. Its own hyper-parameters: ``dims_type``, a frozen ``base.KindDims`` whose fields are named after the recipe
   keys it reads (``read_dims`` reads them, ``check_dims`` refuses bad values, ``dims(model)`` gives them back;
   ``layer_arch`` puts them on ``LayerArch.dims``). To measure it on hardware: ``builder = "module:NAME"`` of a
   ``measure.kind_builders.KindBuilder`` in a module of its own (torch-side; ``kinds.gated_delta`` and
   ``measure.gated_delta_builder``: a kind in two files).
5. Place it (hooks, nothing edited elsewhere): ``symbol`` (its letter in a hybrid layer pattern) and
   ``present(model)`` (default: its symbol is in the pattern) say which models have it; ``layer_arch(model,
   execution)`` its global arch (``rank_shape.layer_arch``); ``shape_fields(fields)`` narrows the execution's
   ``RankShape`` fields (``base.no_recompute``); ``split_problem(model, execution)`` the TP / CP split megatron-core
   refuses for it; ``routed_experts`` (trait) marks MoE layers; ``model_macs(model, seq, causal)`` its forward MACs
   per token by ``flops.FlopsBreakdown`` field. The legal symbols, ``layers.rank_shapes``,
   ``projection.table.chunk_counts`` (``registry.pattern_kinds``), the stage sums, the memory plan, the legality
   check and the model FLOPs follow (``tests/model/kinds/test_adding_a_kind.py``); ``register`` refuses a kind no
   model could place (no symbol outside ``registry.GPT_LAYOUT``, a taken symbol, no ``model_macs``).

``tests/model/kinds/test_kind_registry.py`` checks every registered kind answers every hook and that no new
``kind == "..."`` branch appears outside this package.
"""

from primus_ext.model.kinds.base import HOOKS, TRAITS, Kind, KindComm
from primus_ext.model.kinds.registry import (
    UnknownKind,
    get_kind,
    known_kinds,
    pattern_kinds,
    placed_kinds,
    register,
    symbol_kinds,
    unregister,
)

__all__ = ["HOOKS", "TRAITS", "Kind", "KindComm", "UnknownKind", "get_kind", "known_kinds", "pattern_kinds",
           "placed_kinds", "register", "symbol_kinds", "unregister"]
