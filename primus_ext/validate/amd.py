"""AMD Instinct boards calibrated on AMD runs only: per board, as many knobs as its rows have configurations.

    fits = fit_amd(runs, analytic_projector)       # board -> AmdFit (efficiency, rows, configurations, knobs, loss)
    fits = fit_all(runs, analytic_projector)       # NVIDIA families (``calibrate.fit_by_gpu``) + AMD boards

Why a board and not a family: MI300X and MI325X share the CDNA 3 die but not the board power (750 W against
1 000 W, shared/validation/hardware_specs.csv), so the same kernels sustain other clocks on them (``hardware.power``:
f ~ P^(1/3)); their MLPerf rows run 1.34x apart where the shared die predicts 1.13x (recompute and HBM). Each AMD
board with rows of its own is fitted on them; a board without rows (MI350X) takes its sibling's efficiencies carried
by the sustained-clock ratio (``carry_to_sibling``), and says so.

Why knobs and not ``calibrate.DEFAULT_PARAMS``: every MLPerf row of a board runs one configuration (Llama 2 70B
LoRA, TP1 DP8), so its rows pin one number; fitting eight parameters to it would leave seven at whatever the search
passed through. The knobs a board gets are the first ``n`` of ``KNOBS``, ``n`` its distinct configurations:

1. ``compute``: one factor on the large-GEMM (BF16 and FP8) and attention fractions of peak (what the AMD rows pin;
   the start, ``POOLED_PRIOR``, lends only what they cannot pin: the GEMM size roll-off, the MoE layer's fixed cost,
   the links, row-wise FP8, and the ratios between the fractions of a board with one configuration);
2. ``attention``: attention's fraction alone (rows of other attention shares: head dims, sequence lengths).
A run environment (one cluster's fabric and collective library) adds its own links (``fit_environment``).

Pure; the folds of ``crossval`` call ``fit_all`` (module-level: picklable).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from primus_ext.hardware.power import POWER_CLOCK_EXPONENT
from primus_ext.model.kernel_curve import reference_efficiency
from primus_ext.specs import Efficiency, GPUSpec
from primus_ext.validate.efficiency_fit import fit_by_gpu, log_errors, usable, with_efficiency
from primus_ext.validate.run import Projector
from primus_ext.validate.runs import RunRow
from primus_ext.validate.search import golden_section, nelder_mead

POOLED_PRIOR = Efficiency(
    gemm_max=0.4692, fp8_gemm_max=0.4687, fp8_rowwise_ratio=0.6438, attention=0.4438, gemm_half_size_flops=2.804e10,
    moe_layer_overhead_s=7.983e-4, scaleout_link=0.74, scaleup_link=0.8428,
    calibration="pooled prior: fitted on the 127 Hopper / Blackwell rows of measured_throughput.csv together")
"""Where an AMD board's rows cannot say (the GEMM size roll-off, the MoE layer's fixed cost, the links, row-wise FP8),
the pooled fit on every NVIDIA row (``validate --fit --write-profiles``, mean |log error| 0.111: the block every AMD
profile carried before issue 45) is the start and stays; the compute fractions, which the AMD rows do pin, are fitted
on them. ``START`` picks it."""
START = POOLED_PRIOR
GEMM_MAX_CAP = 0.95
"""Largest fraction of dense peak a fitted GEMM efficiency may take (``calibrate.DEFAULT_PARAMS`` bound)."""
ATTENTION_CAP = 0.65
"""Largest fused-attention fraction of peak (``calibrate.DEFAULT_PARAMS`` bound: FlashAttention-3's best case)."""
SEARCH_STEPS = 24
"""Golden-section steps per knob and round (0.618^24: 1e-5 of its range)."""
ROUNDS = 2
POLISH_EVALS = 60


@dataclass(frozen=True, kw_only=True)
class Knob:
    """One fitted degree of freedom: a coordinate in [low, high] (log-searched if ``log``) and what it sets."""

    name: str
    low: float
    high: float
    log: bool = False

    def span(self) -> tuple[float, float]:
        return (math.log(self.low), math.log(self.high)) if self.log else (self.low, self.high)

    def value(self, x: float) -> float:
        return math.exp(x) if self.log else x


KNOBS = (
    # one factor on every compute fraction of peak: 0.2x .. 1.3x the plain defaults (0.75 BF16 GEMM, 0.55 FP8 GEMM,
    # 0.55 attention), capped at the DEFAULT_PARAMS bounds
    Knob(name="compute", low=0.2, high=1.3, log=True),
    # attention's fraction alone, 0.3x .. 2x of where ``compute`` put it (capped at ATTENTION_CAP)
    Knob(name="attention", low=0.3, high=2.0, log=True),
)
"""A board's links are not among them: no AMD row with a stated configuration leans on them (the MLPerf rows reduce
LoRA adapters only; the Primus rows' global batch, and so their gradient traffic, is assumed). They stay at the plain
defaults; a cluster's links come from its own runs (``fit_environment``)."""
ENVIRONMENT_KNOBS = (
    Knob(name="scaleup_link", low=0.02, high=0.95, log=True),
    # fraction of an overlapped collective hidden behind compute (``Efficiency.overlap``)
    Knob(name="overlap", low=0.0, high=1.0),
)
"""What a run environment (one cluster: its fabric, driver and RCCL settings) sets beyond the board: fitted on the
rows of that environment with the board's compute held (``fit_environment``)."""


def set_knobs(start: Efficiency, knobs: Sequence[Knob], values: Sequence[float]) -> Efficiency:
    """``start`` with each knob at its value (``compute`` and ``attention`` scale ``start``'s fractions)."""
    eff = start
    scale, attention = 1.0, 1.0
    for knob, value in zip(knobs, values, strict=True):
        if knob.name == "compute":
            scale = value
        elif knob.name == "attention":
            attention = value
        else:
            eff = replace(eff, **{knob.name: value})
    if any(k.name in ("compute", "attention") for k in knobs):
        pinned = "attention" in start.measured  # the kernel curves' value (``start_for``): not a knob's
        eff = replace(eff, gemm_max=min(GEMM_MAX_CAP, start.gemm_max * scale),
                      fp8_gemm_max=min(GEMM_MAX_CAP, start.fp8_gemm_max * scale),
                      attention=start.attention if pinned else min(ATTENTION_CAP, start.attention * scale * attention))
    return eff


def fit_knobs(rows: Sequence[RunRow], projector: Projector, start: Efficiency,
              knobs: Sequence[Knob]) -> tuple[Efficiency, float]:
    """Coordinate-wise golden-section search of each knob (``ROUNDS`` rounds), then a Nelder-Mead polish in the
    knobs' unit box; minimises the mean |log error| of ``rows``. Returns (efficiency, loss)."""
    spans = [k.span() for k in knobs]

    def at(u: Sequence[float]) -> Efficiency:
        values = [k.value(lo + min(1.0, max(0.0, x)) * (hi - lo))
                  for k, (lo, hi), x in zip(knobs, spans, u, strict=True)]
        return set_knobs(start, knobs, values)

    groups: dict[str, list[RunRow]] = defaultdict(list)
    for row in rows:  # rows of one configuration share one projection: project it once per evaluation
        groups[repr((row.model, row.execution, row.system))].append(row)

    def loss(u: Sequence[float]) -> float:
        eff = at(u)
        errors = []
        for members in groups.values():
            found = log_errors(members[:1], projector, eff)
            if found:
                projected = members[0].measured_tokens_per_sec_per_gpu * math.exp(found[0][1])
                errors += [math.log(projected / m.measured_tokens_per_sec_per_gpu) for m in members]
        return sum(abs(e) for e in errors) / len(errors) if errors else math.inf

    u = [0.5] * len(knobs)
    best = loss(u)
    for _ in range(ROUNDS):
        for i in range(len(knobs)):
            def along(x: float, i: int = i, base: list[float] = u) -> float:
                return loss([*base[:i], x, *base[i + 1:]])

            x = golden_section(along, 0.0, 1.0, SEARCH_STEPS)
            value = along(x)
            if value < best:
                u, best = [*u[:i], x, *u[i + 1:]], value
    if knobs and POLISH_EVALS > 0:
        polished, value, _ = nelder_mead(loss, u, max_evals=POLISH_EVALS)
        if value < best:
            u, best = list(polished), value
    return at(u), best


def is_amd(run: RunRow) -> bool:
    return run.system is not None and run.system.gpu.vendor == "amd"


def board_of(run: RunRow) -> str:
    """The board a row ran on: its profile name (``mi300x``, ``mi325x``, ``mi355x``)."""
    assert run.system is not None
    return run.system.name


def configurations(rows: Sequence[RunRow]) -> int:
    """Distinct (model, execution) configurations among ``rows``: what they can pin, one number each."""
    return len({repr((r.model, r.execution)) for r in rows})


@dataclass(frozen=True, kw_only=True)
class AmdFit:
    efficiency: Efficiency
    rows: int
    configurations: int
    knobs: tuple[str, ...]
    loss: float


def start_for(row: RunRow) -> Efficiency:
    """Where a board's fit starts: ``START``, with attention pinned (``Efficiency.measured``) at the board family's
    kernel curves' reference value where public kernel data measured them (``hardware/kernel_curves.yaml``)."""
    gpu = row.system.gpu if row.system is not None else None
    curves = gpu.kernel_curves if gpu is not None else None
    if curves is None or curves.attention_fwd is None or curves.attention_bwd is None:
        return START
    value = round(reference_efficiency(curves), 4)
    return replace(START, attention=value, measured=(*START.measured, "attention"))


def fit_board(rows: Sequence[RunRow], projector: Projector, *, label: str = "") -> AmdFit:
    """One AMD board's efficiency from its rows: the first ``configurations(rows)`` knobs, from ``START``."""
    n = configurations(rows)
    start = start_for(rows[0])
    knobs = tuple(k for k in KNOBS[:max(1, min(n, len(KNOBS)))] if k.name not in start.measured)
    efficiency, loss = fit_knobs(rows, projector, start, knobs)
    models = sorted({r.model_name for r in rows})
    efficiency = replace(efficiency, calibration=(
        f"fitted {', '.join(k.name for k in knobs)} on {len(rows)} {board_of(rows[0]).upper()} rows ({n} "
        f"configurations, {len(models)} models: {', '.join(models)}) of {label or 'AMD runs'}, AMD rows only; "
        f"mean |log error| {loss:.3f}; GEMM roll-off, MoE layer cost and links, which no AMD row constrains, from "
        "the pooled NVIDIA prior (validate.amd.POOLED_PRIOR)"
        + (f"; attention {start.attention:.4g} from the {board_of(rows[0]).upper()} family's kernel curves (not fitted)"
           if "attention" in start.measured else "")))
    return AmdFit(efficiency=efficiency, rows=len(rows), configurations=n, knobs=tuple(k.name for k in knobs),
                  loss=loss)


def fit_amd(runs: Sequence[RunRow], projector: Projector, *, label: str = "",
            progress: Callable[[str], None] | None = None) -> dict[str, AmdFit]:
    """Board -> ``AmdFit`` for every AMD board with usable rows (environment-tagged rows excluded: their links are
    their cluster's, ``fit_environment``)."""
    by_board: dict[str, list[RunRow]] = defaultdict(list)
    for run in usable(runs):
        if is_amd(run) and not environment_of(run):
            by_board[board_of(run)].append(run)
    out = {}
    for board, rows in sorted(by_board.items()):
        if progress:
            progress(f"fitting {board} on {len(rows)} AMD rows")
        out[board] = fit_board(rows, projector, label=label)
    return out


def carry_to_sibling(efficiency: Efficiency, source: GPUSpec, target: GPUSpec) -> Efficiency:
    """``source``'s fitted compute fractions for ``target``, a board of the same die at another clock and board
    power: the kernels run at the sustained clock the power allows, f ~ P^(1/3) (``hardware.power``), never above
    ``target``'s own peak clock. As fractions of ``target``'s datasheet peak they scale by
    ``min(1, (P_t / P_s)^(1/3) / (peak_t / peak_s))``: MI355X (1 400 W, 2.5 PF) -> MI350X (1 000 W, 2.3 PF) x0.978;
    MI325X (1 000 W) -> MI300X (750 W, same peak) x0.909; to a board of more power, x1 (its clock headroom is not
    known)."""
    if source.tdp_w <= 0 or target.tdp_w <= 0 or source.bf16_dense_tflops <= 0:
        factor = 1.0
    else:
        power = (target.tdp_w / source.tdp_w) ** POWER_CLOCK_EXPONENT
        factor = min(1.0, power / (target.bf16_dense_tflops / source.bf16_dense_tflops))
    # a measured fraction (attention from the family's kernel curves) is the family's: kept as it is
    attention = efficiency.attention if "attention" in efficiency.measured else efficiency.attention * factor
    return replace(efficiency, gemm_max=efficiency.gemm_max * factor, fp8_gemm_max=efficiency.fp8_gemm_max * factor,
                   attention=attention)


def environment_of(run: RunRow) -> str:
    """The run environment a row names (``environment=NAME`` among its assumptions), or ""."""
    for note in run.assumptions:
        if note.startswith("environment="):
            return note.partition("=")[2]
    return ""


def fit_environment(rows: Sequence[RunRow], projector: Projector, board: Efficiency) -> tuple[Efficiency, float]:
    """The links of one run environment from its rows, the board's compute held: the first
    ``configurations(rows)`` of ``ENVIRONMENT_KNOBS``."""
    knobs = ENVIRONMENT_KNOBS[:max(1, min(configurations(rows), len(ENVIRONMENT_KNOBS)))]
    return fit_knobs(rows, projector, board, knobs)


def fit_all(runs: Sequence[RunRow], projector: Projector) -> dict[str, tuple[Efficiency, int, float]]:
    """``crossval``'s fold fit: NVIDIA families by ``calibrate.fit_by_gpu`` on their rows, AMD boards by
    ``fit_amd`` on theirs (keys: family names and board names; ``apply_all`` applies them)."""
    nvidia = [r for r in runs if not is_amd(r)]
    fits = dict(fit_by_gpu(nvidia, projector))
    for board, fit in fit_amd(runs, projector).items():
        fits[board] = (fit.efficiency, fit.rows, fit.loss)
    return fits


def apply_all(runs: Sequence[RunRow], fits: dict[str, tuple[Efficiency, int, float]]) -> list[RunRow]:
    """Rows with their fold's fit: an AMD row takes its board's (or, without one, its family sibling's carried by
    ``carry_to_sibling``); other rows their family's."""
    out = []
    for run in runs:
        if run.system is not None and is_amd(run):
            eff = _board_efficiency(run.system.gpu, board_of(run), fits)
            run = with_efficiency(run, eff) if eff is not None else run
        elif run.system is not None:
            family = run.system.gpu.family or run.system.name
            if family in fits:
                run = with_efficiency(run, fits[family][0])
        out.append(run)
    return out


def _board_efficiency(gpu: GPUSpec, board: str, fits: dict[str, tuple[Efficiency, int, float]]) -> Efficiency | None:
    if board in fits:
        return fits[board][0]
    from primus_ext.hardware import family_profiles, load_gpu

    siblings = [b for b in family_profiles(gpu.family) if b in fits] if gpu.family else []
    if siblings:  # the same die: carried by the sustained-clock ratio
        source = max(siblings, key=lambda b: fits[b][1])
        return carry_to_sibling(fits[source][0], load_gpu(source), gpu)
    others = [b for b in fits if _is_amd_profile(b)]
    if not others:
        return None
    # another generation: its fractions of peak as they are (its own peaks carry the generation's rates), from the
    # AMD board with the most rows, never another vendor's fit
    return fits[max(others, key=lambda b: fits[b][1])][0]


def _is_amd_profile(name: str) -> bool:
    from primus_ext.errors import RecipeError
    from primus_ext.hardware import load_gpu

    try:
        return load_gpu(name).vendor == "amd"
    except RecipeError:  # a family name (hopper, blackwell), not a profile
        return False


__all__ = ["ENVIRONMENT_KNOBS", "KNOBS", "AmdFit", "apply_all", "board_of", "carry_to_sibling", "configurations",
           "environment_of", "fit_all", "fit_amd", "fit_board", "fit_environment", "fit_knobs", "is_amd", "set_knobs"]
