"""The ``Kind`` base class: what one layer kind costs, saves and communicates (see the package docstring).

It and the kinds import only leaves of the model layer (``rank_shape``, the formula modules), never the registry
nor a module that looks a kind up (docs/DESIGN.md "Layers"). Pure and torch-free (the tuner's hot path calls these
hooks through ``get_kind``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from primus_ext.model.rank_shape import RankShape

if TYPE_CHECKING:
    from primus_ext.hardware import GPUSpec
    from primus_ext.model.memory.activations import ActivationImpl
    from primus_ext.model.rank_shape import LayerArch
    from primus_ext.model.roofline import _Parts
    from primus_ext.specs import ExecutionSpec, ModelSpec


@dataclass(frozen=True, kw_only=True)
class KindComm:
    """The collectives one layer of a kind runs per pass, named, not timed (``projection.comm`` prices them;
    every one moves the layer's activation, ``tokens x hidden`` elements)."""

    pairs: tuple[tuple[str, str], ...] = ()
    """(part, group) TP-style exchanges, the same in forward and backward: an all-reduce, or all-gather +
    reduce-scatter under sequence parallelism; ``group`` is a ``Placements`` field (``"tp"`` or ``"etp"``);
    ``part`` names it for selective recompute (``projection.comm.RECOMPUTED_COMM``)."""
    fwd: tuple[str, ...] = ()
    """Single collectives over the TP group in forward (``collective_time`` op names)."""
    bwd: tuple[str, ...] | None = None
    """Single collectives over the TP group in backward; ``None``: the forward's pairs again."""
    parts: frozenset[str] = frozenset()
    """Every communicating part a full recompute re-runs (pair names, ``cp``, ``ep``); empty: not recomputable."""
    ep: bool = False
    """Token dispatch + combine over the expert-parallel group (EP > 1)."""


@dataclass(frozen=True, kw_only=True)
class KindDims:
    """A kind's own hyper-parameters (subclass it, frozen and ``kw_only``): each field is named after the recipe key
    it is read from (``Kind.read_dims``), its default is Megatron's; ``LayerArch.dims`` and ``ModelSpec.kind_dims``
    carry it, so no shared record grows a field per kind."""


class KeyReader(Protocol):
    """What ``Kind.read_dims`` reads a recipe through (``recipe.args.ArgReader``: typed reads, problems collected)."""

    def int(self, key: str, *, minimum: int = 1, default: int | None = None) -> int | None: ...

    def float(self, key: str, *, minimum: float = 0.0) -> float | None: ...

    def bool(self, key: str, default: bool = False) -> bool: ...


class Kind(ABC):
    """One layer kind: traits (class attributes) and hooks (methods). Subclass, then list an instance in the module's
    ``KINDS`` (a kind of this package: the registry registers them) or ``register`` it (a plugin's)."""

    name: ClassVar[str]
    """The ``RankShape.kind`` string this class prices (the registry's key)."""
    decoder_layer: ClassVar[bool] = False
    """One of the decoder block's ``num_layers`` (not an embedding / output / MTP edge)."""
    recomputable: ClassVar[bool] = False
    """Megatron's activation recompute (full / selective, ``recompute_num_layers``) applies to it: a layer of the
    decoder block (megatron-core ``transformer_block.py`` ``_checkpointed_forward`` wraps its layers only)."""
    attention: ClassVar[bool] = False
    """It runs self-attention: the CP exchange, the sliding-window pattern, core-attention seconds."""
    layer_graph: ClassVar[bool] = False
    """Captured by per-layer CUDA graphs (``cuda_graph == "layers"``; megatron-core graphs ``TransformerLayer``)."""
    lora_adapters: ClassVar[bool] = False
    """LoRA wraps its linears (``model.lora.TARGETS``: the GPT layer's ``linear_qkv`` ... ``linear_fc2``)."""
    takes_sequence_split: ClassVar[bool] = True
    """Its input arrives split over TP under sequence parallelism (the embedding's input is token ids: no)."""
    routed_experts: ClassVar[bool] = False
    """Its layers route tokens to experts: a hybrid model's ``moe_layer_pattern`` marks them (``recipe.hybrid``)."""
    symbol: ClassVar[str] = ""
    """Its layer symbol in a hybrid model's pattern (megatron-core 0.16.1 ssm/mamba_hybrid_layer_allocation.py
    ``Symbols``: ``M`` ``*`` ``-`` ``E``); "" for the GPT kinds (placed by ``moe_layer_pattern``) and the edges. The
    symbol places a hybrid kind: the pattern's legal symbols (``model.layers.symbols``), whether a model has it
    (``present``), a chunk's layer counts (``projection.table.chunk_counts``), stage sums and memory plans."""

    builder: ClassVar[str] = ""
    """``"module:NAME"`` of its measurement builder, a ``measure.kind_builders.KindBuilder`` (torch-side, so named
    here, not imported: ``kind_builders.kind_builder`` imports it on first use); "" for the built-in kinds, whose
    builders ``kind_builders.BUILDERS`` lists."""
    dims_type: ClassVar[type[KindDims] | None] = None
    """The kind's own hyper-parameter record (``KindDims`` subclass), read from the recipe keys its fields name;
    ``None``: the kind reads only shared ``ModelSpec`` fields."""

    # -- its own hyper-parameters (recipe keys -> ``KindDims``) --------------------------------------------------
    @classmethod
    def recipe_keys(cls) -> tuple[str, ...]:
        """The recipe keys this kind reads (its ``dims_type`` fields): modelled keys of the catalogue."""
        return tuple(f.name for f in fields(cls.dims_type)) if cls.dims_type else ()

    def read_dims(self, read: KeyReader) -> KindDims | None:
        """The kind's record from the recipe, each field read as its default's type (a bad value is a problem of
        ``read``, the default kept); ``check_dims`` then says what megatron-core would refuse."""
        if self.dims_type is None:
            return None
        values: dict[str, Any] = {}
        for f in fields(self.dims_type):
            if isinstance(f.default, bool):
                values[f.name] = read.bool(f.name, f.default)
            elif isinstance(f.default, int):
                found = read.int(f.name, default=f.default)
                values[f.name] = f.default if found is None else found
            else:
                found = read.float(f.name)
                values[f.name] = f.default if found is None else found
        return self.dims_type(**values)

    def dims(self, model: ModelSpec) -> Any:
        """This kind's record in ``model`` (``ModelSpec.kind_dims``), else the record of Megatron's defaults."""
        found = dict(model.kind_dims).get(self.name)
        return found if found is not None or self.dims_type is None else self.dims_type()

    def dims_from(self, data: dict | None) -> KindDims | None:
        """The record from its stored form (``dataclasses.asdict``; ``measure.store.shape_from_dict``)."""
        return None if data is None or self.dims_type is None else self.dims_type(**data)

    def check_dims(self, dims: Any) -> list[tuple[str, str, str]]:
        """(key, why, fix) for each value of the record megatron-core refuses whatever the split (default none)."""
        return []

    # -- placement (which models have it, at what shape) ------------------------------------------------------
    def present(self, model: ModelSpec) -> bool:
        """Whether ``model`` has layers of this kind (``layers.rank_shapes`` builds one shape per present
        kind); by default: its symbol appears in the hybrid layer pattern."""
        return bool(self.symbol) and self.symbol in model.hybrid_layer_pattern

    @abstractmethod
    def layer_arch(self, model: ModelSpec, execution: ExecutionSpec) -> LayerArch:
        """The global (unsharded) architecture of one layer of this kind in ``model`` (``rank_shape.layer_arch``
        builds the common one)."""

    def split_problem(self, model: ModelSpec, execution: ExecutionSpec) -> tuple[str, str] | None:
        """(why, fix) when megatron-core refuses this kind's layers under ``execution``'s split (e.g. heads TP or CP
        must divide), else ``None`` (``recipe.hybrid.hybrid_problems`` asks every kind a hybrid pattern holds)."""
        return None

    def shape_fields(self, fields: dict) -> dict:
        """This kind's ``RankShape`` fields from the execution's (``Kind.shape``): as given; a kind that cannot be
        recomputed (``no_recompute``) or only selectively narrows them."""
        return fields

    def shape(self, model: ModelSpec, execution: ExecutionSpec, fields: dict) -> RankShape:
        """One layer of this kind in ``model`` as one rank of ``execution`` runs it, from the execution's ``fields``
        (``rank_shape.execution_fields``): its ``layer_arch``, its ``shape_fields``, its traits the shape carries
        (``rank_shape.KIND_TRAITS``). ``layers.rank_shapes`` asks every kind a model has."""
        return RankShape(kind=self.name, arch=self.layer_arch(model, execution), attention=self.attention,
                         **self.shape_fields(fields))

    def model_macs(self, model: ModelSpec, seq_length: int, causal: bool) -> dict[str, float]:
        """Forward multiply-accumulates per token of one layer of this kind, by ``flops.FlopsBreakdown`` field
        (``attention_core`` is counted as core attention, the others as weight GEMMs): a hybrid model's model FLOPs
        (``flops.flops_breakdown``). The GPT kinds' FLOPs are ``flops_breakdown``'s own formula."""
        raise NotImplementedError(f"layer kind {self.name} does not give its model FLOPs (Kind.model_macs)")

    # -- parameters (count of elements one rank holds) --------------------------------------------------------
    @abstractmethod
    def params(self, shape: RankShape, *, impl: str = "te") -> int:
        """Parameters one rank holds for one layer of this kind (``model.layers.layer_params``)."""

    def expert_params(self, shape: RankShape) -> int:
        """The part of ``params`` in the expert-parallel groups (sharded over expert-DP)."""
        return 0

    def router_params(self, shape: RankShape) -> int:
        """The part of ``params`` that is a router (kept in fp32 by the memory model)."""
        return 0

    def expert_split(self, shape: RankShape) -> tuple[int, int]:
        """(EP, ETP) the kind's weights are split over; no experts: (1, TP)."""
        return 1, shape.tp

    # -- compute (seconds) ----------------------------------------------------------------------------------
    @abstractmethod
    def roofline(self, parts: _Parts, shape: RankShape, gpu: GPUSpec) -> None:
        """Add the roofline seconds of one micro-batch to ``parts`` (``parts.gemm(name, (fwd, dgrad, wgrad))``,
        ``parts.other(name, fwd, bwd)``): ``model.analytic.layer_parts``."""

    def op_sac_gemms_s(self, shape: RankShape, gpu: GPUSpec) -> tuple[float, ...] | None:
        """Seconds of each forward GEMM torchtitan's op-level checkpointing re-runs, when the exact call order is
        known; ``None``: half the forward GEMM time (``analytic.op_sac_recompute_s``)."""
        return None

    def overhead_s(self, shape: RankShape, gpu: GPUSpec) -> float:
        """Seconds per pass beyond FLOPs, bytes and kernel launches (e.g. an MoE layer's host sync)."""
        return 0.0

    @abstractmethod
    def fwd_flops_estimate(self, shape: RankShape) -> float:
        """Rough forward FLOPs of one micro-batch, for sizing CPU measurements (``measure.scale``)."""

    # -- saved activations (bytes, one micro-batch, one rank) -----------------------------------------------
    @abstractmethod
    def saved(self, shape: RankShape, impl: ActivationImpl) -> dict[str, float]:
        """Named bytes saved for backward without recompute (``memory.saved.activation_parts``)."""

    def saved_selective(self, shape: RankShape, impl: ActivationImpl, parts: dict[str, float]) -> dict[str, float]:
        """``parts`` (from ``saved``) under selective recompute of ``shape.recompute_modules``."""
        return parts

    # -- communication (named collectives, per pass) -------------------------------------------------------
    @abstractmethod
    def comm(self, shape: RankShape, sequence_parallel: bool) -> KindComm:
        """The TP / EP collectives of one layer (``projection.comm.layer_comm`` times them)."""


def no_recompute(fields: dict) -> dict:
    """``RankShape`` fields without recompute (``Kind.shape_fields`` of a kind Megatron never recomputes)."""
    return dict(fields, recompute="none", recompute_modules=(), selective_ac="modules")


HOOKS = ("read_dims", "dims", "dims_from", "check_dims", "present",
         "layer_arch", "split_problem", "shape_fields", "model_macs", "params", "expert_params",
         "router_params", "expert_split", "roofline", "op_sac_gemms_s", "overhead_s", "fwd_flops_estimate", "saved",
         "saved_selective", "comm")
"""Every hook a kind answers (the defaults above serve kinds without experts or recompute)."""
TRAITS = ("name", "decoder_layer", "recomputable", "attention", "layer_graph", "lora_adapters", "takes_sequence_split",
          "routed_experts", "symbol", "dims_type", "builder")
"""Every trait (class attribute) a kind declares."""
