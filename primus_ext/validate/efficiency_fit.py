"""Physical calibration: per GPU type, a few efficiency parameters fitted on measured rows.

Only parameters with a physical meaning are fitted (``Efficiency`` fields: GEMM efficiency,
attention efficiency, link efficiencies), one set per GPU family, never per model or per row; a parameter of
the machine or software rather than of the GPU (the NIC efficiency, the MoE layer's fixed cost:
``SHARED_ACROSS_FAMILIES``) is fitted once on the rows of every family together. The
objective is the mean absolute log error of tokens/s/GPU (robust to a few bad rows, symmetric in
over- and under-prediction). Leave-one-model-out cross-validation refits without the held-out model
so the reported error reflects models the fit has not seen.

    primus-ext validate MEASURED.csv --archs ARCHS.csv --fit      # fit, report CV, print YAML blocks
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from primus_ext.errors import PrimusExtError
from primus_ext.specs import Efficiency
from primus_ext.validate.distinct import Distinct, usable
from primus_ext.validate.run import Projector
from primus_ext.validate.runs import RunRow
from primus_ext.validate.search import golden_section, nelder_mead
from primus_ext.validate.stated import check_measured, unmeasured


@dataclass(frozen=True, kw_only=True)
class Param:
    """One fitted efficiency parameter and its physical bounds (searched in log space if ``log``)."""

    name: str
    low: float
    high: float
    log: bool = False
    relative_to: str = ""
    """Searched as a ratio to this other parameter (``low``/``high`` bound the ratio); the ratio is kept
    when that parameter moves."""

    def ratio(self, efficiency: Efficiency) -> float:
        value = getattr(efficiency, self.name)
        return value / getattr(efficiency, self.relative_to) if self.relative_to else value

    def coordinate(self, value: float) -> float:
        """Search coordinate of a value (its log for a log-searched parameter)."""
        return math.log(value) if self.log else value

    def value(self, coordinate: float) -> float:
        """Inverse of ``coordinate``."""
        return math.exp(coordinate) if self.log else coordinate

    def span(self) -> tuple[float, float]:
        return self.coordinate(self.low), self.coordinate(self.high)


DEFAULT_PARAMS = (
    Param(name="gemm_max", low=0.30, high=0.95),  # large BF16 GEMM fraction of dense peak (< 1)
    # large FP8 GEMM fraction of the FP8 peak, as a ratio to the BF16 fraction: an FP8 GEMM is at most
    # 2x (the peak ratio) faster than the BF16 GEMM of the same shape; cuBLAS microbenchmarks reach a
    # slightly lower fraction of peak in FP8 than in BF16 (Luo et al. 2024, arXiv:2402.13499, sec. 5:
    # H800 wgmma dense FP8 ~0.7-0.8x of 2x the BF16 rate). Tying it lets FP8 rows inform BF16 ones.
    Param(name="fp8_gemm_max", low=0.55, high=1.0, relative_to="gemm_max"),
    # row-wise scaled FP8 GEMMs as a fraction of per-tensor ones (< 1: per-row scales in the epilogue and
    # unfused row-wise quantisation kernels); >= 0.3 of the per-tensor rate: with FP8 at twice the BF16 peak
    # and fp8_gemm_max >= 0.55 gemm_max, never below 0.33x the BF16 GEMM
    Param(name="fp8_rowwise_ratio", low=0.30, high=1.0),
    # large FP4 GEMMs' fraction of the FP4 peak as a ratio to FP8's of the FP8 peak (``roofline.gemm_efficiency``):
    # <= 1, block scales every 16 / 32 elements keep FP4 GEMMs no closer to their peak than FP8 ones; >= 0.5: every
    # FP4 GPU's FP4 peak is >= 2x its FP8 peak (B200 / GB200 2.0, B300 3.1, GB300 3.0, MI355X 2.0; hardware_specs.csv),
    # so 0.5 is an FP4 GEMM as fast as the FP8 GEMM of its shape, below which no one would train in FP4.
    # Constrained only by FP4 rows (the six NVFP4 GB200 rows of the development set): one value per family, fitted
    # alone on them with the family's other values held (``fit_split``).
    Param(name="fp4_fp8_ratio", low=0.5, high=1.0),
    # fused (flash) attention's fraction of dense peak over forward + backward (1 : 2.5 FLOPs) at 128-wide heads;
    # <= 0.65: on H100 BF16 FlashAttention-3 reaches at most 75 % of peak forward (its best case, wider heads)
    # and 1.5-1.75x FlashAttention-2's backward, ~0.5-0.55 (Shah et al. 2024, arXiv:2407.08608, abstract and
    # sec. 4.1), so at most 3.5 / (1/0.75 + 2.5/0.55) = 0.60 together. (``roofline.attention_efficiency`` scales
    # it up for wider heads, e.g. x1.09 for MLA's 160-wide mean.) Wider (0.90), held-out folds parked a
    # mispricing there (the Llama3.1-8B fold fitted 0.73).
    Param(name="attention", low=0.15, high=0.65),
    Param(name="gemm_half_size_flops", low=1e8, high=5e10, log=True),  # GEMM size at half efficiency
    Param(name="moe_layer_overhead_s", low=1e-5, high=5e-3, log=True),  # fixed s per MoE layer per pass
    Param(name="scaleout_link", low=0.30, high=0.95),  # NIC bus-bandwidth fraction
    # NVLink / xGMI bus-bandwidth fraction, 0.6-0.85: nccl-tests all-gather / reduce-scatter / all-to-all and
    # ring all-reduce bus bandwidth on 8-GPU NVSwitch boards reaches ~0.7-0.85 of the per-direction link rate for
    # multi-MB messages (nccl-tests PERFORMANCE.md busbw; stas00/ml-engineering network benchmarks on H100 /
    # MI300X). Only in-switch (NVLS) all-reduce goes beyond; it is not modelled (an all-reduce inside the domain,
    # TP without sequence parallelism or DP, is priced as a ring at this fraction).
    # Wider (0.95), held-out folds parked a mispricing there (the Llama3.1-8B fold fitted the bound).
    Param(name="scaleup_link", low=0.60, high=0.85),
)
MIN_FIT_ROWS = 6
"""A GPU type with fewer usable rows keeps its profile defaults: three parameters on fewer rows would
fit noise."""
SEARCH_ROUNDS = 1
"""Coordinate-wise golden-section rounds: they find the basin from the plain defaults ..."""
SEARCH_STEPS = 7
POLISH_EVALS = 300
"""... and a Nelder-Mead polish of the moved parameters walks its valleys (``search.nelder_mead``). From the
defaults, on the development rows (mean |log error| per family, ``primus-ext validate ... --fit``, 2026-12-03, all
eight parameters per family): one round plus the polish 0.0970 Blackwell / 0.1054 Hopper; two rounds without it
(``SEARCH_ROUNDS = 2``, ``POLISH_EVALS = 0``) 0.1102 / 0.1140."""


def with_efficiency(run: RunRow, efficiency: Efficiency) -> RunRow:
    assert run.system is not None
    gpu = replace(run.system.gpu, efficiency=efficiency)
    return replace(run, system=replace(run.system, gpu=gpu))


Loss = Callable[[Sequence[tuple[RunRow, float]]], float]
"""A fit loss over (row, log(projected / measured)) pairs of the rows the projector accepts (never empty)."""


def mean_abs_log(errors: Sequence[tuple[RunRow, float]]) -> float:
    """The calibration's loss: mean |log(projected / measured)|."""
    return sum(abs(e) for _, e in errors) / len(errors)


def _loss_label(loss: Loss) -> str:
    return "mean |log error|" if loss is mean_abs_log else f"loss {getattr(loss, '__name__', type(loss).__name__)}"


def log_errors(runs: Sequence[RunRow] | Distinct, projector: Projector,
               efficiency: Efficiency) -> list[tuple[RunRow, float]]:
    """(row, log(projected / measured)) of each row the projector accepts with ``efficiency``, in row order; rows of one
    configuration are projected once (``Distinct``)."""
    distinct = Distinct.of(runs)
    projected: list[float | None] = []
    for first in distinct.firsts:
        try:
            projected.append(projector(with_efficiency(first, efficiency)))
        except PrimusExtError:
            projected.append(None)
    errors = []
    for run, slot in zip(distinct.rows, distinct.slots, strict=True):
        value = projected[slot]
        if value is not None and value > 0:
            errors.append((run, math.log(value / run.measured_tokens_per_sec_per_gpu)))
    return errors


def objective(runs: Sequence[RunRow] | Distinct, projector: Projector, efficiency: Efficiency,
              loss: Loss = mean_abs_log) -> float:
    """``loss`` of the log errors of the rows the projector accepts (inf if none)."""
    errors = log_errors(runs, projector, efficiency)
    return loss(errors) if errors else math.inf


def clip(efficiency: Efficiency, params: Sequence[Param]) -> Efficiency:
    """``efficiency`` with each fitted parameter moved inside its physical bounds (a profile written
    under wider bounds, or a user's, must not start the search outside them)."""
    out = efficiency
    for p in sorted(params, key=lambda q: bool(q.relative_to)):  # absolute ones first
        bounded = min(p.high, max(p.low, p.ratio(out)))
        out = replace(out, **{p.name: bounded * (getattr(out, p.relative_to) if p.relative_to else 1.0)})
    return out


def _set(base: Efficiency, param: Param, x: float, params: Sequence[Param]) -> Efficiency:
    """``base`` with ``param`` at search coordinate ``x``; parameters relative to it keep their ratio."""
    value = param.value(x)
    if param.relative_to:
        value *= getattr(base, param.relative_to)
    changes = {param.name: value}
    for other in params:
        if other.relative_to == param.name:
            changes[other.name] = other.ratio(base) * value
    return replace(base, **changes)


def to_unit(efficiency: Efficiency, params: Sequence[Param]) -> list[float]:
    """Each parameter's position in its bounds, 0..1 (of its search coordinate; relative ones by ratio)."""
    out = []
    for p in params:
        lo, hi = p.span()
        out.append((p.coordinate(p.ratio(efficiency)) - lo) / (hi - lo))
    return out


def from_unit(base: Efficiency, params: Sequence[Param], u: Sequence[float],
              tied: Sequence[Param] = ()) -> Efficiency:
    """``base`` with ``params`` at unit-box position ``u`` (inverse of ``to_unit``): absolute parameters are
    set first, so a relative one is its ratio times its reference's new value; a parameter of ``tied`` not
    in ``params`` whose reference moves keeps its ratio to it (as ``_set`` does)."""
    out = base
    for p, x in sorted(zip(params, u, strict=True), key=lambda pu: bool(pu[0].relative_to)):
        lo, hi = p.span()
        value = p.value(lo + min(1.0, max(0.0, x)) * (hi - lo))
        out = replace(out, **{p.name: value * (getattr(out, p.relative_to) if p.relative_to else 1.0)})
    names = {p.name for p in params}
    for p in tied:
        if p.relative_to and p.name not in names:
            out = replace(out, **{p.name: p.ratio(base) * getattr(out, p.relative_to)})
    return out


def fresh_start(efficiency: Efficiency, params: Sequence[Param] = DEFAULT_PARAMS) -> Efficiency:
    """``efficiency`` with the fitted parameters back at the plain defaults: a fit then depends only on
    its rows, not on the profile it overwrites (which, in cross-validation, was fitted on the held-out
    model's rows too)."""
    defaults = Efficiency()
    return replace(efficiency, **{p.name: getattr(defaults, p.name) for p in params})


def fit_efficiency(
    runs: Sequence[RunRow], projector: Projector, start: Efficiency, params: Sequence[Param] = DEFAULT_PARAMS,
    *, unconstrained: set[str] | None = None, loss: Loss = mean_abs_log,
) -> tuple[Efficiency, float]:
    """Coordinate-wise golden-section search within each parameter's bounds, then a Nelder-Mead polish of
    the parameters it moved (in the unit box of their bounds). Returns (fit, loss).

    A parameter the rows do not constrain (the loss does not move across its range, e.g. the FP8
    efficiency on a GPU with BF16 rows only) keeps its starting value; its name is added to
    ``unconstrained`` when given. ``loss``: what is minimised (``objective``)."""
    distinct = Distinct.of(runs)

    def score(efficiency: Efficiency) -> float:
        return objective(distinct, projector, efficiency, loss)

    current = clip(start, params)
    best = score(current)
    moved: set[str] = set()
    for _ in range(SEARCH_ROUNDS):
        for param in params:
            def at(x: float, param: Param = param, base: Efficiency = current) -> Efficiency:
                return _set(base, param, x, params)

            lo, hi = param.span()
            if abs(score(at(lo)) - score(at(hi))) < 1e-9:
                continue
            moved.add(param.name)
            candidate = at(golden_section(lambda x, at=at: score(at(x)), lo, hi, SEARCH_STEPS))
            value = score(candidate)
            if value < best:
                current, best = candidate, value
    free = [p for p in params if p.name in moved]
    if free and POLISH_EVALS > 0:
        def loss_at(u: list[float]) -> float:
            return score(from_unit(current, free, u, params))

        u, value, _ = nelder_mead(loss_at, to_unit(current, free), max_evals=POLISH_EVALS)
        if value < best:
            current, best = from_unit(current, free, u, params), value
    if unconstrained is not None:
        unconstrained.update(p.name for p in params if p.name not in moved)
    return current, best


def family_of(run: RunRow) -> str:
    """The calibration group of a row: its GPU's family (same tensor-core generation), else the GPU."""
    assert run.system is not None
    return run.system.gpu.family or run.system.name


SHARED_ACROSS_FAMILIES = ("scaleout_link", "moe_layer_overhead_s")
"""Parameters of the machine and software stack rather than of the GPU generation, fitted on the rows of every
family together (one pass, in ``DEFAULT_PARAMS`` order: the MoE cost before the NIC fraction).

- ``scaleout_link``: the DGX H100, DGX B200 and GB200 NVL72 systems of the development rows all reach other nodes
  through ConnectX-7 400 Gb/s NICs (one per GPU) and NCCL, so the fraction of the NIC rate a collective reaches is
  the same physics on each. Fitted per family, it followed whichever model's rows leaned on the scale-out fabric
  (held out, the GPT-OSS fold moved Blackwell's to 0.93, the Qwen3-30B fold Hopper's to 0.68).
- ``moe_layer_overhead_s``: the fixed cost of an MoE layer pass beyond its FLOPs and bytes is host-side work of
  the same Megatron / Transformer Engine code on both families (router top-k, the dropless dispatcher's
  token-count copy to the host, permutation and grouped-GEMM launches). Fitted per family it took 1.47 ms on
  Hopper and 0.68 ms on Blackwell, each absorbing what its own MoE rows missed; shared, 0.52 ms, and held out the
  error fell (leave-one-model-out p90 36.0 -> 33.8 %, mean |log error| 0.148 -> 0.136; benchmarks/RESULTS.md).

``Efficiency.host_factor`` (the host floor) is not fitted: fitted on these rows (0.57-0.61) it bound two rows and held
out it raised the leave-one-model-out mean |log error| 0.1299 -> 0.1396 (benchmarks/RESULTS.md, issue 52); it is a
measurement of the training host (``benchmarks/gpu_kernel_sweep.py --host``), stated by a profile."""
SHARED_SEARCH_STEPS = 12
"""Golden-section steps of the one-dimensional fit of a shared parameter (0.618^12 = 0.3 % of its range)."""


FP4_PARAM = "fp4_fp8_ratio"
"""The one parameter the FP4 rows calibrate: every other one is fitted on the rows that do not run FP4 (``fit_split``),
so adding FP4 rows never moves what the BF16 / FP8 rows are projected with."""


def _is_fp4(run: RunRow) -> bool:
    return run.execution is not None and run.execution.precision == "fp4"


def _is_hybrid(run: RunRow) -> bool:
    """A hybrid Mamba model's row: projected and reported, never fitted. Its Mamba mixers are priced by an analytic
    roofline with an assumed backward / forward ratio (the SSD scan cannot run here), so its error says how far
    that model is off, not how efficient the GPU's GEMMs, attention or links are (fitted, the three
    Nemotron-3-Nano rows moved the 127 other rows' held-out p90 from 30.9 to 34.5 %; not fitted, those keep 30.9 %:
    benchmarks/RESULTS.md)."""
    return run.model is not None and bool(run.model.hybrid_layer_pattern)


def _without_fp4(families: dict[str, list[RunRow]]) -> dict[str, list[RunRow]]:
    return {name: [r for r in members if not _is_fp4(r) and not _is_hybrid(r)] or members
            for name, members in families.items()}


def fit_split(members: Sequence[RunRow], projector: Projector, start: Efficiency, params: Sequence[Param], *,
              unconstrained: set[str], loss: Loss = mean_abs_log) -> tuple[Efficiency, float]:
    """``fit_efficiency`` with the FP4 rows kept apart: the parameters other than ``FP4_PARAM`` on the other rows,
    then ``FP4_PARAM`` alone on the FP4 rows with those held (one bounded ratio for all of them, never per row);
    hybrid Mamba rows are not fitted (``_is_hybrid``). The loss returned is over every row. Rows that all run FP4
    are fitted together as they are."""
    fitting = [r for r in members if not _is_hybrid(r)] or list(members)
    fp4 = [r for r in fitting if _is_fp4(r)]
    rest = [r for r in fitting if not _is_fp4(r)]
    ratio = [p for p in params if p.name == FP4_PARAM]
    if not rest or not fp4 or not ratio:
        efficiency, _ = fit_efficiency(fitting, projector, start, params, unconstrained=unconstrained, loss=loss)
        return efficiency, objective(members, projector, efficiency, loss)
    efficiency, _ = fit_efficiency(rest, projector, start, [p for p in params if p.name != FP4_PARAM],
                                   unconstrained=unconstrained, loss=loss)
    efficiency, _ = fit_efficiency(fp4, projector, efficiency, ratio, unconstrained=unconstrained, loss=loss)
    return efficiency, objective(members, projector, efficiency, loss)


def _fit_families(families: dict[str, list[RunRow]], projector: Projector, own: Sequence[Param],
                  held: dict[str, float], loss: Loss,
                  progress: Callable[[str], None] | None) -> dict[str, tuple[Efficiency, float, set[str]]]:
    """Each family's ``own`` parameters fitted from the plain defaults with ``held`` values fixed, except the
    ones its profile states as measured (``Efficiency.measured``), kept as stated: family -> (efficiency, loss,
    parameters its rows do not constrain)."""
    out = {}
    for name, members in families.items():
        if progress:
            progress(f"fitting {name} on {len(members)} rows")
        profile = members[0].system.gpu.efficiency  # type: ignore[union-attr]
        mine = [p for p in own if p.name not in profile.measured]
        # every calibration parameter not measured starts at its plain default, fitted here or not (a parameter
        # a variant leaves out must not keep a profile value fitted on the held-out rows)
        reset = [p for p in {p.name: p for p in (*DEFAULT_PARAMS, *own)}.values() if p.name not in profile.measured]
        start = replace(fresh_start(profile, reset), **unmeasured(held, profile))
        kept: set[str] = set()
        efficiency, value = fit_split(members, projector, start, mine, unconstrained=kept, loss=loss)
        out[name] = (efficiency, value, kept)
    return out


def _fit_shared(families: dict[str, list[RunRow]], fits: dict[str, tuple[Efficiency, float, set[str]]],
                param: Param, projector: Projector, loss: Loss, held: dict[str, float]) -> float | None:
    """``param`` fitted alone on the rows of every family together, each row with its family's fitted
    efficiency and the ``held`` shared values otherwise (golden-section search within the parameter's bounds);
    ``None`` when the rows do not constrain it (the loss is the same at both bounds, e.g. no row leaves its
    node)."""
    distinct = {name: Distinct.of(members) for name, members in families.items()}

    def score(x: float) -> float:
        values = {**held, param.name: param.value(x)}
        errors = [error for name, members in distinct.items()
                  for error in log_errors(members, projector,
                                          replace(fits[name][0], **unmeasured(values, fits[name][0])))]
        return loss(errors) if errors else math.inf

    lo, hi = param.span()
    if abs(score(lo) - score(hi)) < 1e-9:
        return None
    return param.value(golden_section(score, lo, hi, SHARED_SEARCH_STEPS))


def fit_by_gpu(
    runs: Sequence[RunRow], projector: Projector, *, label: str = "",
    params: Sequence[Param] = DEFAULT_PARAMS, progress: Callable[[str], None] | None = None,
    loss: Loss = mean_abs_log, shared: Sequence[str] = SHARED_ACROSS_FAMILIES,
) -> dict[str, tuple[Efficiency, int, float]]:
    """Per GPU family (hopper, blackwell, ...; the profile name when a profile has none): (fitted
    efficiency, rows used, loss). Families with too few rows are absent and keep their defaults.

    When more than one family is fitted, the ``shared`` parameters are fitted on the rows of those families
    together: the families are fitted with them at their defaults, each shared parameter is then fitted alone
    on all their rows with each family's other parameters held, and the families are fitted again with the
    shared values held."""
    by_gpu: dict[str, list[RunRow]] = defaultdict(list)
    for run in usable(runs):
        by_gpu[family_of(run)].append(run)
    families = {name: members for name, members in sorted(by_gpu.items()) if len(members) >= MIN_FIT_ROWS}
    check_measured(families)
    common = [p for p in params if p.name in shared] if len(families) > 1 else []
    own = [p for p in params if p not in common]
    held = {p.name: getattr(Efficiency(), p.name) for p in common}
    fits = _fit_families(families, projector, own, held, loss, progress)
    fitted_shared: dict[str, float] = {}
    if common:
        for param in common:
            if progress:
                progress(f"fitting {param.name} on the rows of {'/'.join(families)} together")
            value = _fit_shared(_without_fp4(families), fits, param, projector, loss, held)  # and those fitted so far
            if value is not None:
                fitted_shared[param.name] = held[param.name] = value
        if fitted_shared:
            fits = _fit_families(families, projector, own, held, loss, progress)
    rows = sum(len(m) for m in families.values())
    out = {}
    for name, (efficiency, value, kept) in fits.items():
        members = families[name]
        models = sorted({m.model_name for m in members})
        gpus = sorted({m.gpu for m in members})
        measured = efficiency.measured
        fitted = ", ".join(p.name for p in own if p.name not in kept and p.name not in measured)
        unfitted = f"; {', '.join(sorted(kept))} not constrained by these rows (left at the default)" if kept else ""
        unfitted += "".join(f"; {m} {getattr(efficiency, m):.4g} as measured (not fitted)" for m in measured)
        together = {k: v for k, v in fitted_shared.items() if k not in measured}
        if together:
            unfitted += (f"; {', '.join(f'{k} {v:.4g}' for k, v in together.items())} fitted on the {rows} rows of "
                         f"{'/'.join(families)} together")
        unshared = sorted(k for k in held if k not in fitted_shared and k not in measured)
        if unshared:
            unfitted += f"; {', '.join(unshared)} not constrained by these rows (left at the default)"
        efficiency = replace(efficiency, calibration=(
            f"fitted {fitted} on {len(members)} {'/'.join(gpus)} rows ({len(models)} models) of "
            f"{label or 'the validation set'}; {_loss_label(loss)} {value:.3f}{unfitted}"))
        out[name] = (efficiency, len(members), value)
    return out


def fit_pooled(
    runs: Sequence[RunRow], projector: Projector, *, label: str = "", params: Sequence[Param] = DEFAULT_PARAMS,
    progress: Callable[[str], None] | None = None, loss: Loss = mean_abs_log,
) -> tuple[Efficiency, int, float] | None:
    """One efficiency block fitted on the usable rows of every family together, from the plain defaults:
    the prior for GPU families with too few rows of their own (``fit_by_gpu`` leaves them out). The
    fractions of peak that tuned training stacks reach on current accelerators are close to each other
    (the calibrated GEMM fractions of Hopper and Blackwell differ by a fifth, the defaults sit far above
    both), so the pooled fit is a better first guess than the defaults; its calibration string says it is
    not the family's own. ``None`` without enough rows."""
    members = usable(runs)
    if len(members) < MIN_FIT_ROWS:
        return None
    if progress:
        progress(f"fitting the pooled prior on {len(members)} rows")
    kept: set[str] = set()
    efficiency, value = fit_split(members, projector, Efficiency(), params, unconstrained=kept, loss=loss)
    families = sorted({family_of(m) for m in members})
    fitted = ", ".join(p.name for p in params if p.name not in kept)
    efficiency = replace(efficiency, calibration=(
        f"pooled prior (fewer than {MIN_FIT_ROWS} usable rows of this family): fitted {fitted} on all "
        f"{len(members)} rows of "
        f"{'/'.join(families)} of {label or 'the validation set'} together; {_loss_label(loss)} {value:.3f}"))
    return efficiency, len(members), value


def apply_fits(runs: Sequence[RunRow], fits: dict[str, tuple[Efficiency, int, float]]) -> list[RunRow]:
    out = []
    for run in runs:
        if run.system is not None and family_of(run) in fits:
            run = with_efficiency(run, fits[family_of(run)][0])
        out.append(run)
    return out
