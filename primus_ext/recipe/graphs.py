"""CUDA graph settings of a recipe -> ``ExecutionSpec.cuda_graph`` (none / layers / full_iteration).

megatron-core 0.16.1 (``TransformerConfig.__post_init__``) reads ``cuda_graph_impl`` (none / local /
transformer_engine), ``cuda_graph_scope`` and the deprecated ``enable_cuda_graph`` / ``external_cuda_graph``;
what it refuses becomes a ``Problem`` on the key at fault (through the ``ArgReader``).
"""

from __future__ import annotations

from primus_ext.recipe.args import ArgReader

CUDA_GRAPH_SCOPES = ("full", "full_iteration", "attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba")
"""megatron-core 0.16.1 transformer/enums.py ``CudaGraphScope`` names, plus ``full`` (deprecated: the whole layer)."""


def cuda_graph_mode(a: ArgReader) -> str:
    """megatron-core TransformerConfig.__post_init__: the deprecated ``enable_cuda_graph`` means impl ``local``,
    ``external_cuda_graph`` means ``transformer_engine`` (neither with ``cuda_graph_impl`` nor together); impl
    ``local`` with scope ``full_iteration`` captures the whole iteration, any other graph is per layer."""
    impl = a.choice("cuda_graph_impl", ("none", "local", "transformer_engine"), "none")
    legacy = [k for k in ("enable_cuda_graph", "external_cuda_graph") if a.bool(k)]
    if legacy and impl != "none":
        a.bad(legacy[0], f"deprecated alias of cuda_graph_impl, which is also set ({impl})",
              fix=f"remove {legacy[0]}")
    elif len(legacy) == 2:
        a.bad("external_cuda_graph", "cannot be enabled together with enable_cuda_graph",
              fix="set cuda_graph_impl: local or transformer_engine instead of both")
    elif legacy:
        impl = "local" if legacy[0] == "enable_cuda_graph" else "transformer_engine"
    if impl in (None, "none"):
        return "none"
    scope = a.raw("cuda_graph_scope")
    scopes = [str(x).strip() for x in scope] if isinstance(scope, list | tuple) else str(scope or "").split(",")
    scopes = [x.strip() for x in scopes if x.strip()]
    unknown = [x for x in scopes if x not in CUDA_GRAPH_SCOPES]
    if unknown:
        a.bad("cuda_graph_scope", f"unknown scope(s) {', '.join(unknown)}",
              fix=f"use megatron-core's CudaGraphScope names: {', '.join(CUDA_GRAPH_SCOPES)}")
    elif "full" in scopes and len(scopes) > 1:
        a.bad("cuda_graph_scope", "'full' (the whole layer) cannot be combined with other scopes",
              fix="use full alone, or an empty scope, or list the parts")
    if impl == "transformer_engine" and "full_iteration" in scopes:
        a.bad("cuda_graph_scope", "a full-iteration graph needs megatron-core's local implementation",
              fix="set cuda_graph_impl: local")
    mode = graph_mode(impl, scopes)
    if mode == "none" and a.bool("cpu_offloading"):  # graphs of parts only: recipe.checks sees no graph
        a.bad("cpu_offloading", "megatron-core raises 'CUDA graphs not supported with CPU offloading'",
              fix="set cuda_graph_impl: none or cpu_offloading: false")
    return mode


def graph_mode(impl: str, scopes: list[str]) -> str:
    """``ExecutionSpec.cuda_graph`` of a megatron-core ``cuda_graph_impl`` and ``cuda_graph_scope`` list: per-layer
    graphs count as ``layers`` when they capture the whole layer (empty scope or ``full``) or its attention
    (``attn``); graphs of the router / preprocessing alone leave the launch-bound rest eager (``none``)."""
    if impl in ("", "none"):
        return "none"
    if impl == "local" and "full_iteration" in scopes:
        return "full_iteration"
    return "layers" if not scopes or "full" in scopes or "attn" in scopes else "none"
