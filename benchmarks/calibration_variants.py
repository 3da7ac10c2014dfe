"""Leave-one-model-out figures of variants of the per-GPU calibration, against the shipped one.

Run from the repository root::

    python benchmarks/calibration_variants.py                          # every variant (6-20 min each on 2 cores)
    python benchmarks/calibration_variants.py --variants baseline,cauchy --jobs 2
    python benchmarks/calibration_variants.py --in-sample --variants baseline,expert-launch   # ~1.5 min each
    python benchmarks/calibration_variants.py --per-family-nic --variants cauchy  # nothing shared, as before 2026-12-04

Each variant but ``summed-roofline``, ``grouped-size`` and ``expert-launch`` changes how the efficiencies are
fitted, never the projection: the loss it minimises, the parameters it fits or their bounds, or which parameters
the GPU families share. Every fold is fitted from the plain defaults without the held-out model's rows, as
``primus-ext validate --cv`` does (``baseline`` is exactly that). The variants are the ones
``benchmarks/RESULTS.md`` reports as tried and not kept; this script is how those figures are reproduced.
``--in-sample`` fits each variant once on all rows instead and prints, per GPU family, the fit's mean |log error|
over those rows and the fitted GEMM size at half efficiency.

    baseline         mean |log error|, the eight ``calibrate.DEFAULT_PARAMS``: ``scaleout_link`` and
                     ``moe_layer_overhead_s`` on all families together, the others per GPU family but those a
                     family's profile states as measured (Hopper's attention since 2026-12-04) (shipped)
    cauchy           Cauchy loss c^2 log(1 + (e / c)^2), c = 0.15: rows far off count less
    squared          mean squared log error: rows far off count more (the tail the p90 target measures)
    model-balanced   mean |log error| with each row weighted 1 / sqrt(rows of its model)
    config-once      each distinct configuration (a setup measured on several releases) weighted once
    kernel-overhead  the launch overhead per layer pass (``Efficiency.kernel_overhead_s``) fitted too
    per-family-moe   the fixed MoE-layer cost fitted per GPU family, only ``scaleout_link`` shared (the shipped fit
                     until the MoE cost was shared, 2026-12-04)
    summed-roofline  a GEMM's math and HBM times added instead of the slower one taken (operand traffic not
                     overlapped with math near the ridge point); the projection changes, in this process only
    grouped-size     an MoE grouped GEMM's size efficiency read at the size of the whole launch (all local
                     experts' tiles fill the GPU together) instead of one expert's GEMM; in this process only
    expert-launch    20 us more per expert GEMM of a grouped GEMM (Transformer Engine's GroupedLinear issues one
                     cuBLAS GEMM per local expert on a few streams); in this process only
    fp8-ratio-85     the large FP8 GEMM's fraction of the FP8 peak at least 0.85 of the BF16 one (default bound
                     0.55): large cuBLAS GEMMs reach similar fractions of peak in both precisions
    fp8-ratio-1      the same fraction in FP8 and BF16 (the bound at 0.999)
    hbm              the HBM bandwidth fraction of memory-bound kernels (``Efficiency.hbm``, default 0.80)
                     fitted too, within 0.4-0.95
    wide-bounds      attention up to 0.90 of peak and NVLink up to 0.95 of its rate (the bounds until 2026-12-04,
                     seventh session; shipped since: 0.65 / 0.85, from FlashAttention-3 and nccl-tests figures)
    wide-attention   attention up to 0.90 only
    wide-nvlink      NVLink up to 0.95 only
    fixed-nvlink     NVLink not fitted: every fold keeps the plain default 0.75 of the link rate (nccl-tests
                     bus bandwidth inside an NVSwitch domain, 0.7-0.85), one degree of freedom fewer per family
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import replace
from functools import partial
from pathlib import Path

from primus_ext.validate.efficiency_fit import (
    DEFAULT_PARAMS,
    Param,
    fit_by_gpu,
    usable,
)

REPO = Path(__file__).resolve().parents[1]
VALIDATION = REPO.parent / "shared" / "validation"
CAUCHY_SCALE = 0.15
"""|log error| at which a row's pull on the Cauchy fit starts to fade (~16 %)."""
KERNEL_OVERHEAD = Param(name="kernel_overhead_s", low=5e-6, high=2e-3, log=True)
"""5 us (one launch) to 2 ms per layer pass (a host-bound layer)."""
HBM = Param(name="hbm", low=0.4, high=0.95)
"""Fraction of the HBM datasheet bandwidth memory-bound kernels reach (a device copy on an H200 moved 4.3 of the
datasheet's 4.8 TB/s, ~0.9: /work/.library/device/KINDS.md, 2026-10-28)."""
EXPERT_LAUNCH_S = 20e-6
"""One more GEMM launch per local expert: host-side cuBLAS call plus stream switch, the order of the
per-layer-pass ``Efficiency.kernel_overhead_s`` default (2e-5 s); not fitted (5e-6 s was tried in-sample too)."""


def cauchy(errors: Sequence[tuple[object, float]]) -> float:
    c = CAUCHY_SCALE
    return sum(c * c * math.log1p((e / c) ** 2) for _, e in errors) / len(errors)


def _weighted(errors: Sequence[tuple[object, float]], key, power: float) -> float:
    counts = Counter(key(run) for run, _ in errors)
    weights = [counts[key(run)] ** -power for run, _ in errors]
    return sum(w * abs(e) for w, (_, e) in zip(weights, errors, strict=True)) / sum(weights)


def _model(run) -> str:
    return run.model_name


def _config(run) -> tuple:
    return (run.model_name, run.gpu, run.num_gpus, run.execution)


def squared(errors: Sequence[tuple[object, float]]) -> float:
    return sum(e * e for _, e in errors) / len(errors)


def model_balanced(errors) -> float:
    return _weighted(errors, _model, 0.5)


def config_once(errors) -> float:
    return _weighted(errors, _config, 1.0)


def _gemm_seconds(m, n, k, gpu, precision, *, recipe="delayed", count=1.0, summed=False, grouped=False,
                  launch_s=0.0) -> float:
    """``roofline.gemm_seconds`` with the math and HBM times added (``summed``), the efficiency read at the
    size of all ``count`` GEMMs of one grouped launch (``grouped``), or ``launch_s`` more per GEMM of a group."""
    from primus_ext.model import roofline

    flops = 2.0 * m * n * k
    if flops <= 0 or count <= 0:
        return 0.0
    size = flops * count if grouped else flops
    math_s = flops / (gpu.peak_tflops(precision) * 1e12 * roofline.gemm_efficiency(size, gpu, precision, recipe))
    mem_s = roofline.membound_seconds(roofline.gemm_bytes(m, n, k, precision), gpu)
    per_gemm = math_s + mem_s if summed else max(math_s, mem_s)
    return count * (per_gemm + (launch_s if count > 1 else 0.0))


@contextmanager
def patched_gemm(**how: float) -> Iterator[None]:
    """``roofline.gemm_seconds`` (looked up at call time by the roofline layers) replaced while the folds run;
    forked fold processes inherit it (``main`` runs the folds in this process where they would not fork). The
    memoised layer costs and projections are forgotten on the way in and out: the plain defaults every fold
    starts from give the same (shape, GPU) keys in every variant."""
    from primus_ext.model import analytic, roofline
    from primus_ext.projection.evaluate import clear_cost_cache

    def forget() -> None:
        analytic.analytic_cost.cache_clear()
        clear_cost_cache()

    original = roofline.gemm_seconds
    roofline.gemm_seconds = partial(_gemm_seconds, **how)
    forget()
    try:
        yield
    finally:
        roofline.gemm_seconds = original
        forget()


def _bounded(**high: float) -> tuple[Param, ...]:
    """``DEFAULT_PARAMS`` with the named parameters' upper bounds set to ``high``."""
    return tuple(replace(p, high=high[p.name]) if p.name in high else p for p in DEFAULT_PARAMS)


def _fp8_ratio_floor(low: float) -> tuple[Param, ...]:
    """``DEFAULT_PARAMS`` with the FP8 / BF16 large-GEMM fraction ratio bounded below by ``low``."""
    return tuple(replace(p, low=low) if p.name == "fp8_gemm_max" else p for p in DEFAULT_PARAMS)


VARIANTS: dict[str, tuple[Callable, Callable[[], AbstractContextManager]]] = {
    "baseline": (fit_by_gpu, nullcontext),
    "cauchy": (partial(fit_by_gpu, loss=cauchy), nullcontext),
    "squared": (partial(fit_by_gpu, loss=squared), nullcontext),
    "model-balanced": (partial(fit_by_gpu, loss=model_balanced), nullcontext),
    "config-once": (partial(fit_by_gpu, loss=config_once), nullcontext),
    "kernel-overhead": (partial(fit_by_gpu, params=(*DEFAULT_PARAMS, KERNEL_OVERHEAD)), nullcontext),
    "per-family-moe": (partial(fit_by_gpu, shared=("scaleout_link",)), nullcontext),
    "summed-roofline": (fit_by_gpu, partial(patched_gemm, summed=True)),
    "grouped-size": (fit_by_gpu, partial(patched_gemm, grouped=True)),
    "expert-launch": (fit_by_gpu, partial(patched_gemm, launch_s=EXPERT_LAUNCH_S)),
    "fp8-ratio-85": (partial(fit_by_gpu, params=_fp8_ratio_floor(0.85)), nullcontext),
    "fp8-ratio-1": (partial(fit_by_gpu, params=_fp8_ratio_floor(0.999)), nullcontext),
    "hbm": (partial(fit_by_gpu, params=(*DEFAULT_PARAMS, HBM)), nullcontext),
    "wide-bounds": (partial(fit_by_gpu, params=_bounded(attention=0.90, scaleup_link=0.95)), nullcontext),
    "wide-attention": (partial(fit_by_gpu, params=_bounded(attention=0.90)), nullcontext),
    "wide-nvlink": (partial(fit_by_gpu, params=_bounded(scaleup_link=0.95)), nullcontext),
    "fixed-nvlink": (partial(fit_by_gpu, params=tuple(p for p in DEFAULT_PARAMS if p.name != "scaleup_link")),
                     nullcontext),
}
"""name -> (the fit each fold runs, the context the folds run in)."""


def _fit_of(name: str, per_family_nic: bool) -> tuple[Callable, Callable[[], AbstractContextManager]]:
    """The variant's fit and context; ``per_family_nic``: with nothing shared across families (every parameter
    fitted per family), as every variant was until 2026-12-04."""
    fit, context = VARIANTS[name]
    return (partial(fit, shared=()) if per_family_nic else fit), context


def _in_sample(runs, names: Sequence[str], per_family_nic: bool = False) -> int:
    """Each variant fitted once on every usable row: per family, mean |log error| of the fitted projection over
    the family's rows (whatever loss the variant minimised) and the fitted ``gemm_half_size_flops``."""
    from primus_ext.validate.efficiency_fit import family_of, objective
    from primus_ext.validate.run import analytic_projector

    rows = usable(runs)
    print(f"{'variant':<16} {'family':<10} {'rows':>4} {'mean |log err|':>15} {'gemm_half_size_flops':>21}",
          flush=True)
    for name in names:
        fit, context = _fit_of(name, per_family_nic)
        with context():
            for family, (eff, n, _) in fit(rows, analytic_projector).items():
                loss = objective([r for r in rows if family_of(r) == family], analytic_projector, eff)
                print(f"{name:<16} {family:<10} {n:>4} {loss:>15.4f} {eff.gemm_half_size_flops:>21.3g}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of: " + ", ".join(VARIANTS))
    parser.add_argument("--jobs", type=int, default=2, help="folds in parallel processes")
    parser.add_argument("--in-sample", action="store_true",
                        help="fit each variant on all rows; print per-family loss and gemm_half_size_flops")
    parser.add_argument("--by-model", action="store_true", help="print each variant's error by held-out model")
    parser.add_argument("--per-family-nic", action="store_true",
                        help="fit every parameter per family (none shared), as every variant was until 2026-12-04")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        print(f"error: unknown variant(s) {', '.join(unknown)}; choose from {', '.join(VARIANTS)}", file=sys.stderr)
        return 2
    from primus_ext.validate.archs import read_archs
    from primus_ext.validate.crossval import leave_one_model_out
    from primus_ext.validate.hardware_csv import read_hardware
    from primus_ext.validate.run import analytic_projector
    from primus_ext.validate.runs import read_runs

    runs = read_runs(VALIDATION / "measured_throughput.csv", read_archs(VALIDATION / "model_archs.csv"),
                     read_hardware(VALIDATION / "hardware_specs.csv"))
    if args.in_sample:
        return _in_sample(runs, names, args.per_family_nic)
    print(f"{'variant':<16} {'median':>7} {'p90':>7} {'max':>7} {'mean|log|':>10} {'>20%':>5}   (|error| %, "
          f"leave-one-model-out, {len(usable(runs))} rows)", flush=True)
    for name in names:
        start = time.monotonic()
        fit, context = _fit_of(name, args.per_family_nic)
        forks = sys.platform.startswith("linux")  # crossval forks its fold processes on Linux only
        jobs = args.jobs if context is nullcontext or forks else 1
        with context():
            s = leave_one_model_out(runs, analytic_projector, fit=fit, jobs=jobs).summary
        print(f"{name:<16} {s.median_abs_error_pct:>6.1f}  {s.p90_abs_error_pct:>6.1f}  {s.max_abs_error_pct:>6.1f}"
              f"  {s.mean_abs_log_error:>9.4f} {s.n_above_20_pct:>5}   ({time.monotonic() - start:.0f} s)", flush=True)
        if args.by_model:
            for model, m in s.by_model.items():
                print(f"    {model:<26} {m.n:>3} rows  median {m.median_error_pct:+6.1f} %  "
                      f"median |err| {m.median_abs_error_pct:5.1f} %  max {m.max_abs_error_pct:5.1f} %", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
