"""Pipeline schedules as objects: one class per schedule, one registry, one place that picks the effective one.

    >>> from primus_ext.model.pipeline.registry import get_schedule, resolve_schedule
    >>> get_schedule("zb-h1").label
    'ZB-H1'
    >>> resolve_schedule("zb-h1", pp=1, vpp=1).name      # one stage: nothing to pipeline
    '1f1b'

As torchtitan's ``get_schedule_class`` (torchtitan/distributed/pipeline_parallel.py): every caller asks the
registry, no caller compares schedule names. Adding a schedule: see the ``primus_ext.model.pipeline`` docstring.
"""

from __future__ import annotations

from functools import lru_cache
from typing import ClassVar

from primus_ext.errors import InfeasibleConfig, PrimusExtError


class Schedule:
    """One pipeline schedule. Subclasses set the class attributes and override the hooks that differ."""

    name: ClassVar[str] = ""
    """``ExecutionSpec.pipeline_schedule`` value."""
    label: ClassVar[str] = ""
    """Shown in reports."""
    primus_names: ClassVar[tuple[str, ...]] = ()
    """Primus ``pp_algorithm`` values / recipe flags that select it (modules/megatron/primus_pipeline.yaml,
    backends/megatron/core/pipeline_parallel/zerobubble/README.md)."""
    model_copies: ClassVar[int] = 1
    """Model replicas each rank keeps (parameters, gradients, optimizer state scale by it; DualPipe: 2)."""
    splits_wgrad: ClassVar[bool] = False
    """Weight-gradient runs as separate ops after the input-gradient (the zero-bubble family)."""
    batch_kernel: ClassVar[str | None] = None
    """The schedule structure ``batch.simulate_many`` runs for it; None: simulated one configuration at a time."""
    chunk_placement: ClassVar[str] = "loop"
    """How chunks sit on ranks: "loop" (chunk c of rank r is virtual stage c*PP + r, Megatron) or "v"
    (2 chunks: chunk 0 on ranks 0..P-1, chunk 1 back on P-1..0; ZB-V / V-half / V-min / DualPipeV)."""
    fixed_chunks: ClassVar[int | None] = None
    """Chunks per rank the schedule requires whatever VPP says (V-shaped: 2); None: VPP's."""
    simulate_name: ClassVar[str | None] = None
    """The name ``schedules.simulate`` knows it by (None: ``name``)."""
    pairs_passes: ClassVar[bool] = False
    """Runs a forward and another micro-batch's backward as one overlapped pair in its steady state, each one's EP
    all-to-all hidden behind the other's compute (DualPipe's "feature" of DeepSeek-V3 report sec. 3.2.1): the
    projection prices its layers as under EP overlap and its passes alone (``*_unpaired``) exposed."""

    def chunks_per_rank(self, vpp: int | None) -> int:
        return self.fixed_chunks or max(1, vpp or 1)

    def legality(self, pp: int, vpp: int | None, num_microbatches: int) -> list[str]:
        """What this schedule requires of PP, VPP and the micro-batch count ([] when it runs)."""
        problems = []
        if pp < 1 or num_microbatches < 1:
            problems.append(f"{self.name} needs at least one pipeline rank and one micro-batch; got PP={pp}, "
                            f"micro-batches={num_microbatches}")
        return problems

    def stage_of(self, rank: int, chunk: int, pp: int) -> int:
        """Virtual stage (model order) of ``chunk`` on ``rank``."""
        if self.chunk_placement == "v":
            return rank if chunk == 0 else 2 * pp - 1 - rank
        return chunk * pp + rank

    def stage_count(self, pp: int, chunks: int) -> int:
        """Model stages the layers are split into: one per chunk (``pp * chunks``); DualPipe's two copies hold
        the same ``pp`` stages."""
        return pp * chunks

    def placement(self, pp: int, chunks: int) -> tuple[tuple[int, int], ...]:
        """``(rank, chunk)`` of each model stage in model order (the first holder where copies share one)."""
        where: dict[int, tuple[int, int]] = {}
        for chunk in range(chunks):
            for rank in range(pp):
                where.setdefault(self.stage_of(rank, chunk, pp), (rank, chunk))
        return tuple(where[s] for s in range(self.stage_count(pp, chunks)))

    def p2p_links(self, pp: int, chunks: int) -> tuple[tuple[int, int], ...]:
        """The two ranks each ``p2p`` slot of ``simulate`` connects (equal: the hand-over stays on one rank and
        costs nothing): slot ``s`` joins model stages ``s`` and ``s + 1``."""
        where = self.placement(pp, chunks)
        return tuple((where[s][0], where[s + 1][0]) for s in range(len(where) - 1))

    def rank_order(self, rank: int, pp: int, vpp: int, m: int, group: int | None = None,
                   extra_warmup: int = 0) -> list[tuple[int, int, int]]:
        """(kind, micro-batch, chunk) ops rank ``rank`` executes (fixed-order schedules; schedules.rank_order)."""
        from primus_ext.model.pipeline.schedules import rank_order

        return rank_order(self.simulate_name or self.name, rank, pp, vpp, m, group or pp, extra_warmup)

    def simulate(self, times, num_microbatches: int, p2p=(), **kwargs):
        """``schedules.simulate`` under this schedule's name."""
        from primus_ext.model.pipeline.schedules import simulate

        kwargs.pop("wgrad_share", None)  # Megatron's orders and ZB-H1's do not weigh deferred W against memory
        return simulate(self.simulate_name or self.name, times, num_microbatches, p2p, **kwargs)

    def chunk_microbatches(self, m: int) -> int:
        """Micro-batches each model chunk of a rank runs in a step of ``m`` (DualPipe: each copy half of them)."""
        return m

    def recipe_keys(self, pp: int) -> dict[str, object] | None:
        """The Primus zero-bubble keys (modules/megatron/zero_bubble.yaml) that run this schedule, at their Primus
        defaults where they do not matter; None when no Primus / Megatron-LM key runs it (a what-if)."""
        return {"patch_zero_bubble": False, "zero_bubble_v_schedule": False, "zero_bubble_v_schedule_mem_setup": "half",
                "zero_bubble_max_pending_backward": "auto"}

    def run(self, times, num_microbatches: int, p2p=(), *, timeline: bool = False,
            moe_a2a_overlap_warmup: bool = False, wgrad_share: float = 0.0):
        """One step at any micro-batch count (what the projection calls). Megatron's schedules go through
        ``schedules.simulate``; the others (orders built in Python, op by op: the zero-bubble, V and DeepSeek
        ones) are simulated directly up to a few dozen micro-batches and extended in closed form past that
        (``long.long_step``, no timeline there), with ``long.ZB_SIMULATED_OPS`` as the fallback budget.
        ``wgrad_share``: a deferred W's inputs over a chunk's forward activations (``zbv.wgrad_share``), for a
        schedule whose order keeps both under one memory limit (ZB-V)."""
        if self.batch_kernel is not None:  # Megatron's fixed orders: schedules.simulate's periodic fast path
            return self.simulate(times, num_microbatches, p2p, timeline=timeline,
                                 moe_a2a_overlap_warmup=moe_a2a_overlap_warmup)
        from primus_ext.model.pipeline.long import ZB_SIMULATED_OPS, long_step, simulated_directly

        pp, chunks, p2p = len(times), len(times[0]), tuple(p2p)
        share = {"wgrad_share": wgrad_share} if wgrad_share else {}
        if timeline and simulated_directly(pp, chunks, num_microbatches, ZB_SIMULATED_OPS):
            return self.simulate(times, num_microbatches, p2p, timeline=True, **share)  # a report: every op
        group = 2 if chunks > 1 else 1  # references step by 2 micro-batches (DualPipe splits them in two halves)
        # first try references of a few dozen micro-batches (the steady state of these orders sets in after ~2*PP;
        # long_step checks three equal increments), then the full budget
        small = 2 * pp * chunks * (2 * pp * group + 3 * group * max(2, pp) + 2)
        for budget in (min(small, ZB_SIMULATED_OPS), ZB_SIMULATED_OPS):
            if simulated_directly(pp, chunks, num_microbatches, budget):
                return _own_cached(self.name, times, num_microbatches, p2p, wgrad_share)
            try:
                return long_step(lambda k: _own_cached(self.name, times, k, p2p, wgrad_share), num_microbatches,
                                 pp, chunks, group, budget)
            except InfeasibleConfig:
                if budget == ZB_SIMULATED_OPS:
                    raise
        raise AssertionError("unreachable")

    def chunk_in_flight(self, rank: int, pp: int, vpp: int, m: int, extra: int = 0) -> tuple[float, ...]:
        """Micro-batches whose activations each model chunk of ``rank`` holds at its peak (what
        ``model.memory.schedule.chunk_in_flight`` returns): 1F1B's ``min(PP - r, M)`` on its one chunk."""
        return (float(min(pp - rank, m)),) * self.chunks_per_rank(vpp)

    def in_flight_microbatches(self, rank: int, pp: int, vpp: int, m: int, extra: int = 0) -> float:
        """Whole-stage micro-batches of activations ``rank`` holds at its peak (chunk counts / chunks)."""
        counts = self.chunk_in_flight(rank, pp, vpp, m, extra)
        return sum(counts) / len(counts)

    def wgrad_held_microbatches(self, rank: int, pp: int, m: int) -> int:
        """Micro-batches whose weight-gradient inputs stay held past their backward (split-W schedules)."""
        return 0

    def held_states(self, rank: int, pp: int, vpp: int, m: int, extra: int = 0,
                    wgrad_share: float = 0.0) -> tuple[tuple[tuple[float, ...], float], ...]:
        """(micro-batches held per chunk, whole-stage micro-batches of weight-gradient inputs held) at the moments
        that can be ``rank``'s memory peak; the memory model takes the largest (``wgrad_share``: as ``run``).
        By default one state: the two
        peaks taken together (exact where they coincide, an upper bound otherwise)."""
        return ((self.chunk_in_flight(rank, pp, vpp, m, extra), float(self.wgrad_held_microbatches(rank, pp, m))),)

    kept_over_vpp: ClassVar[bool] = False
    """Selected by its own flag, the spec keeps it even when VPP is set (Primus's patch_zero_bubble: the recipe
    records zb-h1; what runs is then ``resolve``'s choice)."""

    def resolve(self, pp: int, vpp: int | None) -> Schedule:
        """The schedule that actually runs when this one is asked for with this PP / VPP: VPP > 1 → interleaved
        (unless it places its own chunks), one stage → 1F1B (megatron-core forward_backward_no_pipelining)."""
        if self.fixed_chunks is None and (vpp or 1) > 1:
            return get_schedule("interleaved")
        if pp <= 1:
            return get_schedule("1f1b")
        return self

    def __repr__(self) -> str:
        return f"<schedule {self.name}>"


def peak_count(pp: int, m: int) -> int:
    """The micro-batch count a split-W schedule's memory peak is read at: the peak is reached in the warm-up, so
    the held counts stop changing from 3*PP micro-batches on (ZB-H2, the V and DeepSeek schedules, PP 2-8:
    tests/model/pipeline/test_schedule_registry.py); 4*PP keeps the count's parity (DualPipe: even)."""
    return min(m, 4 * pp)


@lru_cache(maxsize=4096)
def _own_cached(name: str, times: tuple, m: int, p2p: tuple[float, ...], wgrad_share: float = 0.0):
    """A schedule's own simulator, memoised on its inputs (the tuner repeats them)."""
    return SCHEDULES[name].simulate(times, m, p2p, **({"wgrad_share": wgrad_share} if wgrad_share else {}))


SCHEDULES: dict[str, Schedule] = {}
"""name -> the one instance of each registered schedule."""


def register(cls: type[Schedule]) -> type[Schedule]:
    """Class decorator: add ``cls`` (one instance) to ``SCHEDULES``; a taken name is refused."""
    if not cls.name or (cls.name in SCHEDULES and type(SCHEDULES[cls.name]) is not cls):
        raise ValueError(f"schedule name {cls.name!r} is empty or already registered")
    SCHEDULES[cls.name] = cls()
    return cls


def get_schedule(name: str | Schedule) -> Schedule:
    """The registered schedule called ``name``; unknown → ``PrimusExtError`` listing the known names."""
    if isinstance(name, Schedule):
        return name
    try:
        return SCHEDULES[name]
    except (KeyError, TypeError):
        raise PrimusExtError(f"unknown pipeline schedule {name!r}; known: {', '.join(SCHEDULES)}") from None


def by_primus_name(name: str) -> Schedule | None:
    """The schedule a Primus ``pp_algorithm`` value or flag selects (None: none registered claims it)."""
    return next((s for s in SCHEDULES.values() if name in s.primus_names), None)


def resolve_schedule(requested: str | Schedule, pp: int, vpp: int | None) -> Schedule:
    """THE choice of the schedule that runs: VPP > 1 → interleaved unless the requested schedule places its own
    chunks; PP == 1 → 1F1B; otherwise the requested one (``Schedule.resolve``)."""
    return get_schedule(requested).resolve(pp, vpp)


def spec_schedule(requested: str | Schedule, pp: int, vpp: int | None) -> Schedule:
    """The value an ``ExecutionSpec`` records (recipe resolve, tuner): a flag-selected schedule
    (``kept_over_vpp``) with PP > 1 stays; else interleaved when VPP > 1; else 1F1B."""
    chosen = get_schedule(requested)
    if pp > 1 and chosen.kept_over_vpp:
        return chosen
    return get_schedule("interleaved") if (vpp or 1) > 1 else get_schedule("1f1b")


def copies_of(execution: object) -> int:
    """Model copies each rank of ``execution`` keeps (``Schedule.model_copies``: DualPipe 2, else 1). Each stage's
    parameters then live on two pipeline ranks (s and PP-1-s): the data-parallel gradient reduction, the
    distributed optimizer's shards and the parameter all-gather run over both copies' data-parallel ranks
    (``model.placement.with_copies``), one optimizer state per parameter (our assumption: the report does not say
    how DeepSeek shards it; ZeRO-1 over every holder of a parameter is the natural layout)."""
    if execution.pipeline_model_parallel_size <= 1:  # type: ignore[attr-defined]
        return 1
    return get_schedule(execution.pipeline_schedule).model_copies  # type: ignore[attr-defined]


def resolve(execution: object) -> Schedule:
    """The schedule an ``ExecutionSpec`` runs (its ``pipeline_schedule``, PP and VPP)."""
    pp = execution.pipeline_model_parallel_size  # type: ignore[attr-defined]
    vpp = execution.virtual_pipeline_model_parallel_size  # type: ignore[attr-defined]
    return resolve_schedule(execution.pipeline_schedule, pp, vpp)  # type: ignore[attr-defined]


@register
class OneF1B(Schedule):
    """Megatron-core's non-interleaved 1F1B (PipeDream-Flush, Narayanan et al. 2021 §2.2)."""

    name = "1f1b"
    label = "1F1B"
    primus_names = ("1f1b",)  # primus_pipeline.yaml pp_algorithm
    batch_kernel = "1f1b"


@register
class Interleaved(Schedule):
    """Megatron-core's interleaved 1F1B (Narayanan et al. 2021 §2.2, VPP model chunks per rank)."""

    name = "interleaved"
    label = "interleaved 1F1B"
    primus_names = ("1f1b-interleaved",)  # primus_pipeline.yaml pp_algorithm
    batch_kernel = "interleaved"

    def legality(self, pp: int, vpp: int | None, num_microbatches: int) -> list[str]:
        problems = super().legality(pp, vpp, num_microbatches)
        if not problems and (vpp or 1) > 1:
            from primus_ext.model.pipeline.schedules import interleaving_problem

            problem = interleaving_problem(pp, num_microbatches)
            problems += [problem] if problem else []
        return problems

    def resolve(self, pp: int, vpp: int | None) -> Schedule:
        return self if (vpp or 1) > 1 else get_schedule("1f1b")

    def chunk_in_flight(self, rank: int, pp: int, vpp: int, m: int, extra: int = 0) -> tuple[float, ...]:
        if vpp <= 1:
            return super().chunk_in_flight(rank, pp, vpp, m, extra)
        # megatron-core 0.16.1 schedules.py get_pp_rank_microbatches: warm-up chunk-micro-batches + the one in
        # the steady state, issued in groups of PP per chunk cycling over the chunks; EP all-to-all overlap
        # schedules one more warm-up forward
        in_flight = min((pp - rank - 1) * 2 + (vpp - 1) * pp + 1 + extra, m * vpp)
        cycles, rem = divmod(in_flight, pp * vpp)
        return tuple(float(cycles * pp + min(max(rem - c * pp, 0), pp)) for c in range(vpp))


@register
class ZBH1(Schedule):
    """Zero-bubble ZB-H1 (Qi et al. 2023, arXiv:2401.10241 §3): B split into input-grad B and weight-grad W,
    1F1B's activation memory; one chunk per rank."""

    name = "zb-h1"
    label = "ZB-H1"
    primus_names = ("zero-bubble", "zero-bubble-heuristic", "patch_zero_bubble")  # primus_pipeline.yaml
    splits_wgrad = True
    kept_over_vpp = True
    batch_kernel = None  # op order chosen greedily on the op times: one configuration at a time

    def legality(self, pp: int, vpp: int | None, num_microbatches: int) -> list[str]:
        problems = super().legality(pp, vpp, num_microbatches)
        if (vpp or 1) > 1:
            problems.append("zb-h1 is a one-chunk schedule; use interleaved with VPP > 1")
        return problems

    def recipe_keys(self, pp: int) -> dict[str, object] | None:
        # zero_bubble.yaml: "when number of stages are 8 ... setting to 8 will use zb1p" ("auto" is adaptive)
        return {**super().recipe_keys(pp), "patch_zero_bubble": True, "zero_bubble_max_pending_backward": pp}

    def wgrad_held_microbatches(self, rank: int, pp: int, m: int) -> int:
        # rank r defers up to r weight-grads (zb.py's greedy order; Qi et al. §3.1 ZB-H1 memory = 1F1B's + W inputs)
        return min(rank, m)
