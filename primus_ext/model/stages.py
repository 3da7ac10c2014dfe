"""Which layers each pipeline rank holds: Megatron's split, uneven first/last stages and layouts.

``pipeline_plan(model, execution)`` returns, for every pipeline rank, its model chunks (one per
virtual stage) with the decoder layer indices, and whether the chunk holds the embedding, the
output layer + loss, or MTP layers. It follows megatron-core's rules
(``transformer_block.get_num_layers_to_build``, ``transformer_layer.get_transformer_layer_offset``,
``PipelineParallelLayerLayout``): virtual stage ``v`` of rank ``r`` is flat chunk ``v * PP + r`` and
chunks take consecutive layers in flat order.

``layout_problems(model, execution)`` lists every reason a split is illegal (used by the recipe
validator and the tuner's legality check). Pure and torch-free.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import lru_cache
from operator import attrgetter

from primus_ext.errors import Problem, RecipeError
from primus_ext.model.identity_memo import IdentityMemo
from primus_ext.model.pipeline.registry import Schedule, resolve_schedule
from primus_ext.specs import ExecutionSpec, ModelSpec

_LAYOUT_CHARS = {"E": "embedding", "L": "loss", "t": "decoder", "m": "mtp"}


@dataclass(frozen=True, kw_only=True)
class ChunkPlan:
    """One model chunk (virtual stage) of one pipeline rank."""

    rank: int
    chunk: int
    layers: tuple[int, ...]
    """Global decoder-layer indices (0-based) in this chunk."""
    embedding: bool = False
    output: bool = False
    """Output layer + loss."""
    mtp_layers: int = 0


@dataclass(frozen=True, kw_only=True)
class StagePlan:
    """Everything one pipeline rank holds: its chunks in virtual-stage order."""

    rank: int
    chunks: tuple[ChunkPlan, ...]

    @property
    def layers(self) -> tuple[int, ...]:
        return tuple(i for c in self.chunks for i in c.layers)

    @property
    def embedding(self) -> bool:
        return any(c.embedding for c in self.chunks)

    @property
    def output(self) -> bool:
        return any(c.output for c in self.chunks)

    @property
    def mtp_layers(self) -> int:
        return sum(c.mtp_layers for c in self.chunks)

    def moe_layers(self, model: ModelSpec) -> int:
        pattern = model.moe_layer_pattern
        return sum(1 for i in self.layers if i < len(pattern) and pattern[i])

    def dense_layers(self, model: ModelSpec) -> int:
        return len(self.layers) - self.moe_layers(model)


MAX_LAYOUT_CHARS = 16_384
"""Layers plus stage separators a layout may expand to: megatron-core builds one module per layer character,
and the largest Primus preset has 126 decoder layers (Llama-3.1-405B); a bound well above any model."""


def parse_layout(layout: str) -> list[list[str]]:
    """Megatron's layout string -> flat list of virtual stages, each a list of layer types.

    ``"Et*3|(tt|)*29,m|L"`` -> [[E,t,t,t], [t,t] x 29, [m], [L]]: commas are cosmetic, ``(..)*n``
    and ``x*n`` repeat. Raises ``ValueError`` on an unknown character.
    """
    text = layout.replace(",", "").replace(" ", "")
    if len(text) > MAX_LAYOUT_CHARS:
        raise ValueError(f"{len(text):,} characters; a layout has at most {MAX_LAYOUT_CHARS:,} layers and stages")
    budget = [MAX_LAYOUT_CHARS]  # characters the expansion may still write, checked before each repeat

    def repeat(m: re.Match[str]) -> str:
        count = int(m.group(2)) if len(m.group(2)) <= 6 else MAX_LAYOUT_CHARS + 1
        size = len(m.group(1)) * count
        budget[0] -= size
        if budget[0] < 0:
            raise ValueError(f"expands to more than {MAX_LAYOUT_CHARS:,} layers and stages; megatron-core builds "
                             "one module per character")
        return m.group(1) * count

    text = re.sub(r"\(([^)]+)\)\*(\d+)", repeat, text)
    text = re.sub(r"(.)\*(\d+)", repeat, text)
    stages = []
    for part in text.split("|"):
        bad = sorted({ch for ch in part if ch not in _LAYOUT_CHARS})
        if bad:
            raise ValueError(f"unknown layer character(s) {bad}; known: E (embedding), t (decoder), m (mtp), L (loss)")
        stages.append([_LAYOUT_CHARS[ch] for ch in part])
    return stages


def virtual_stages(execution: ExecutionSpec) -> int:
    """Model chunks per pipeline rank (the effective VPP): ``virtual_pipeline_model_parallel_size``, or, when it
    is unset, the layout's stage count over PP, as megatron-core derives it (0.16.1
    ``transformer_config.py`` ``__post_init__``: ``virtual_pipeline_model_parallel_size =
    pipeline_model_parallel_layout.virtual_pipeline_model_parallel_size`` when that is > 1). The split
    (``pipeline_plan``), the schedule and the step tail all read it from here."""
    fixed = _schedule(execution).fixed_chunks
    if fixed:  # V-shaped and DeepSeek schedules place their own two chunks per rank
        return fixed
    layout = execution.pipeline_model_parallel_layout
    if execution.virtual_pipeline_model_parallel_size is not None or not layout:
        return execution.vpp
    return layout_vpp(layout, execution.pp)


def _schedule(execution: ExecutionSpec) -> Schedule:
    """The schedule that runs (``registry.resolve_schedule``): it decides where each model stage sits."""
    return resolve_schedule(execution.pipeline_schedule, execution.pp, execution.virtual_pipeline_model_parallel_size)


@lru_cache(maxsize=1024)
def layout_vpp(layout: str, pp: int) -> int:
    """Stages per rank of ``layout`` (1 when it does not parse or split over PP: ``layout_problems`` says why)."""
    try:
        stages = len(parse_layout(layout))
    except ValueError:
        return 1
    return stages // pp if stages >= pp and stages % pp == 0 else 1


def _layout_counts(model: ModelSpec, execution: ExecutionSpec, problems: list[Problem]) -> list[list[str]] | None:
    path = "pipeline_model_parallel_layout"
    try:
        flat = parse_layout(execution.pipeline_model_parallel_layout or "")
    except ValueError as err:
        problems.append(Problem(path=path, value=execution.pipeline_model_parallel_layout, message=str(err)))
        return None
    pp = execution.pp
    if len(flat) % pp:
        problems.append(Problem(path=path, value=execution.pipeline_model_parallel_layout,
                                message=f"{len(flat)} stages is not a multiple of PP={pp}",
                                fix="give PP * VPP '|'-separated stages"))
        return None
    vpp = len(flat) // pp
    if execution.virtual_pipeline_model_parallel_size not in (None, vpp) and not (
        vpp == 1 and execution.virtual_pipeline_model_parallel_size == 1
    ):
        problems.append(Problem(path=path, value=execution.pipeline_model_parallel_layout,
                                message=f"layout has {vpp} virtual stages per rank but "
                                        f"VPP={execution.virtual_pipeline_model_parallel_size}",
                                fix="make the layout's stage count PP * VPP or drop the VPP setting"))
    types = [t for stage in flat for t in stage]
    if types.count("decoder") != model.num_layers:
        problems.append(Problem(path=path, value=execution.pipeline_model_parallel_layout,
                                message=f"layout has {types.count('decoder')} decoder layers ('t') but the "
                                        f"model has num_layers={model.num_layers}",
                                fix="make the count of 't' equal num_layers"))
    if types.count("embedding") != 1 or not flat[0] or flat[0][0] != "embedding":
        problems.append(Problem(path=path, value=execution.pipeline_model_parallel_layout,
                                message="the embedding 'E' must appear once, first in the first stage"))
    if types.count("loss") != 1 or not flat[-1] or flat[-1][-1] != "loss":
        problems.append(Problem(path=path, value=execution.pipeline_model_parallel_layout,
                                message="the loss 'L' must appear once, last in the last stage"))
    if types.count("mtp") != model.mtp_num_layers:
        problems.append(Problem(path=path, value=execution.pipeline_model_parallel_layout,
                                message=f"layout has {types.count('mtp')} MTP layers ('m') but "
                                        f"mtp_num_layers={model.mtp_num_layers}"))
    return flat


def _even_counts(model: ModelSpec, execution: ExecutionSpec, problems: list[Problem],
                 last_at: tuple[int, int] | None = None) -> list[list[int]]:
    """Decoder layers per [rank][chunk] without a layout (Megatron's even / uneven split); ``last_at``: the
    (rank, chunk) holding the last stage (the loss), when not Megatron's (PP-1, VPP-1) (V placement)."""
    pp, vpp, n = execution.pp, execution.vpp, model.num_layers
    first, last = execution.decoder_first_pipeline_num_layers, execution.decoder_last_pipeline_num_layers
    if pp == 1:
        if vpp > 1 and n % vpp:
            problems.append(Problem(path="num_layers", value=n, message=f"not divisible by VPP={vpp}"))
        return [[n // vpp] * vpp]
    counts: list[list[int]] = []
    if first is not None or last is not None:
        if execution.account_for_embedding_in_pipeline_split or execution.account_for_loss_in_pipeline_split:
            problems.append(Problem(path="decoder_first_pipeline_num_layers",
                                    message="uneven first/last stages cannot be combined with "
                                            "account_for_embedding/loss_in_pipeline_split",
                                    fix="use one mechanism, or a pipeline_model_parallel_layout"))
        for path, count in (("decoder_first_pipeline_num_layers", first), ("decoder_last_pipeline_num_layers", last)):
            if count is not None and count <= 0:  # megatron-core 0.16.1 transformer_config.py __post_init__
                problems.append(Problem(path=path, value=count, message="must be larger than 0",
                                        fix="leave it unset for an even share"))
        if problems:
            return []
        middle_stages = pp - (first is not None) - (last is not None)
        middle = n - (first or 0) - (last or 0)
        if middle < 0 or (middle_stages > 0 and middle % middle_stages) or (middle_stages == 0 and middle):
            problems.append(Problem(path="decoder_first_pipeline_num_layers",
                                    value=(first, last),
                                    message=f"{middle} remaining layers cannot be split evenly over "
                                            f"{middle_stages} middle stage(s) (num_layers={n}, PP={pp})",
                                    fix="choose first/last stage layer counts leaving a multiple of the "
                                        "middle stage count"))
            return []
        per_middle = middle // middle_stages if middle_stages else 0
        for rank in range(pp):
            per_rank = per_middle
            if rank == 0 and first is not None:
                per_rank = first
            if rank == pp - 1 and last is not None:
                per_rank = last
            if per_rank % vpp:
                problems.append(Problem(path="virtual_pipeline_model_parallel_size", value=vpp,
                                        message=f"pipeline rank {rank} has {per_rank} layers, not divisible "
                                                f"by VPP={vpp}"))
                return []
            counts.append([per_rank // vpp] * vpp)
        return counts
    total = n + execution.account_for_embedding_in_pipeline_split + execution.account_for_loss_in_pipeline_split
    if total % (pp * vpp):
        problems.append(Problem(path="num_layers", value=n,
                                message=f"{total} layers (incl. accounted embedding/loss) not divisible by "
                                        f"PP*VPP={pp}*{vpp}",
                                fix="change PP/VPP, or set decoder_first/last_pipeline_num_layers or a "
                                    "pipeline_model_parallel_layout"))
        return []
    per_chunk = total // (pp * vpp)
    counts = [[per_chunk] * vpp for _ in range(pp)]
    if execution.account_for_embedding_in_pipeline_split:
        counts[0][0] -= 1
    if execution.account_for_loss_in_pipeline_split:
        last_rank, last_chunk = last_at or (pp - 1, vpp - 1)
        counts[last_rank][last_chunk] -= 1
    if min(min(c) for c in counts) < 0:
        problems.append(Problem(path="account_for_embedding_in_pipeline_split",
                                message="not enough layers for the embedding/loss stage"))
        return []
    return counts


def _plan(model: ModelSpec, execution: ExecutionSpec) -> tuple[tuple[StagePlan, ...], list[Problem]]:
    problems: list[Problem] = []
    pp = execution.pp
    schedule = _schedule(execution)
    chunks = virtual_stages(execution)
    where = schedule.placement(pp, chunks)  # model stage -> (rank, chunk) holding it (loop, V or DualPipe)
    per_stage: list[list[str]] | None = None
    if execution.pipeline_model_parallel_layout:
        per_stage = _layout_counts(model, execution, problems)
        if per_stage is None or problems:
            return (), problems
        if len(per_stage) != len(where):
            problems.append(Problem(path="pipeline_model_parallel_layout",
                                    value=execution.pipeline_model_parallel_layout,
                                    message=f"{len(per_stage)} stages, but the {schedule.label} schedule places "
                                            f"{len(where)} on PP={pp}", fix=f"give {len(where)} '|'-separated stages"))
            return (), problems
        decoder = [stage.count("decoder") for stage in per_stage]
    else:
        split = replace(execution, virtual_pipeline_model_parallel_size=len(where) // pp)
        counts = _even_counts(model, split, problems, last_at=where[-1] if len(where) // pp == chunks else None)
        if problems:
            return (), problems
        decoder = [counts[r][c] for r, c in where]
    first_layer = [sum(decoder[:s]) for s in range(len(where))]
    last_stage = len(where) - 1

    def chunk_plan(rank: int, chunk: int) -> ChunkPlan:
        stage = schedule.stage_of(rank, chunk, pp)
        types = per_stage[stage] if per_stage is not None else None
        return ChunkPlan(
            rank=rank, chunk=chunk, layers=tuple(range(first_layer[stage], first_layer[stage] + decoder[stage])),
            embedding="embedding" in types if types is not None else stage == 0,
            output="loss" in types if types is not None else stage == last_stage,
            mtp_layers=(types.count("mtp") if types is not None
                        else model.mtp_num_layers if stage == last_stage else 0),
        )

    stages = tuple(StagePlan(rank=r, chunks=tuple(chunk_plan(r, c) for c in range(chunks))) for r in range(pp))
    return stages, problems


@lru_cache(maxsize=4096)
def _plan_memo(model: ModelSpec, split: ExecutionSpec) -> tuple[tuple[StagePlan, ...], tuple[Problem, ...]]:
    stages, problems = _plan(model, split)
    return stages, tuple(problems)


LAYOUT_FIELDS = ("pipeline_model_parallel_layout", "decoder_first_pipeline_num_layers",
                 "decoder_last_pipeline_num_layers", "account_for_embedding_in_pipeline_split",
                 "account_for_loss_in_pipeline_split")
"""How a recipe places its layers on the (PP, VPP) stages, beyond the two sizes."""


def _split_only(execution: ExecutionSpec) -> ExecutionSpec:
    """The execution reduced to the fields the layer split depends on (the memo key): the tuner asks
    for the same split under thousands of batch / overlap / sharding variants."""
    return ExecutionSpec(
        pipeline_model_parallel_size=execution.pipeline_model_parallel_size,
        virtual_pipeline_model_parallel_size=execution.virtual_pipeline_model_parallel_size,
        pipeline_schedule=execution.pipeline_schedule,
        **{name: getattr(execution, name) for name in LAYOUT_FIELDS},
    )


_split_key = attrgetter("pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size", "pipeline_schedule",
                        *LAYOUT_FIELDS)
_PLANS = IdentityMemo(limit=4096)
"""(id(model), split fields) -> ``_plan_memo``'s answer: the tuner's legality check asks ~10^4 times per search, and
building the reduced spec and hashing both specs for ``_plan_memo`` was 1.4 s of a DeepSeek-V3 search at 8 192 GPUs
(cProfile of ``tune --strategy exhaustive``: ``layout_problems`` cumulative)."""


def _plan_of(model: ModelSpec, execution: ExecutionSpec) -> tuple[tuple[StagePlan, ...], tuple[Problem, ...]]:
    return _PLANS.get((id(model), _split_key(execution)), model, lambda: _plan_memo(model, _split_only(execution)))


def layout_problems(model: ModelSpec, execution: ExecutionSpec) -> list[Problem]:
    """Every reason the model's layers cannot be split over PP x VPP as configured."""
    return list(_plan_of(model, execution)[1])


def pipeline_plan(model: ModelSpec, execution: ExecutionSpec) -> tuple[StagePlan, ...]:
    """Per pipeline rank, its chunks and layers. Raises ``RecipeError`` when the split is illegal."""
    stages, problems = _plan_of(model, execution)
    if problems:
        raise RecipeError(problems=list(problems))
    return stages
