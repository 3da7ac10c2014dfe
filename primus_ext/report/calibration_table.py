"""The ``calibrate`` report: each logged run against its projection, the correction, what moved, where it applies."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from primus_ext.calibration.compare import LogComparison
    from primus_ext.calibration.record import CalibrationRecord


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:,.1f} ms"


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**30:,.1f} GiB"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.3f}"


def format_run(c: LogComparison) -> str:
    m, p, s = c.measured, c.projected, c.log.stats
    excluded = ", ".join(f"{i} {why}" for i, why in s.excluded[:6]) + (" ..." if len(s.excluded) > 6 else "")
    framework = f", {c.log.framework_version}" if c.log.framework_version else ""
    lines = [f"{c.path}  ({c.log.format} log{framework})",
             f"  iterations {s.first}-{s.last}: {s.n} used" + (f"; excluded: {excluded}" if excluded else ""),
             f"  {'':<22}{'measured':>20}{'projected':>14}{'measured/projected':>21}",
             f"  {'step time':<22}{_ms(m.step_s) + f' +-{m.spread:.1%}':>20}{_ms(p.step_s):>14}"
             f"{_ratio(m.step_s, p.step_s):>21}",
             f"  {'tokens/s/GPU':<22}{_num(m.tokens_per_s_per_gpu, 0):>20}{_num(p.tokens_per_s_per_gpu, 0):>14}"
             f"{_ratio(m.tokens_per_s_per_gpu, p.tokens_per_s_per_gpu):>21}",
             f"  {'TFLOP/s/GPU':<22}{_num(m.tflops_per_gpu):>20}{_num(p.tflops_per_gpu):>14}"
             f"{_ratio(m.tflops_per_gpu, p.tflops_per_gpu):>21}"]
    rank = "" if c.memory_rank is None else f" (rank {c.memory_rank})"
    lines.append(f"  {'peak memory' + rank:<22}{_gib(m.peak_bytes):>20}{_gib(p.peak_bytes):>14}"
                 f"{_ratio(m.peak_bytes, p.peak_bytes):>21}")
    if m.peak_bytes is not None:
        lines.append("  (measured peak: the log's max reserved + the device memory outside torch's allocator the model "
                     "holds; projected: that rank's pipeline stage)")
    lines += [f"  note: {n}" for n in c.notes]
    lines += [f"  flagged: {f}" for f in c.log.flags]
    return "\n".join(lines)


def format_correction(comparisons: Sequence[LogComparison], record: CalibrationRecord) -> str:
    """The correction and how much each part of the step moved."""
    from primus_ext.calibration.apply import NEARBY_SPREAD, band_of, parts_of

    c = record.correction
    lines = [f"correction: kernels x{c.kernel_factor:.3f}" + (" (whole step: the projected links alone exceed the "
             "run)" if c.scope == "step" else "") + f", step overhead {c.overhead_s * 1e3:.1f} ms"
             + ("" if c.runs > 1 else " (one run cannot separate a fixed overhead from the factor)")
             + (f", memory x{c.memory_factor:.3f}" if c.memory_factor else ", memory uncalibrated")]
    for comp in comparisons:
        parts = parts_of(comp.projection.breakdown)
        if c.scope == "step":
            moved = f"whole step x{c.kernel_factor:.3f}"
        else:
            moved = (f"kernels {_ms(parts.kernels_s)} -> {_ms(c.kernel_factor * parts.kernels_s)}, links "
                     f"{_ms(parts.links_s)} (unchanged)")
        lines.append(f"  {comp.path}: {moved}, overhead +{_ms(c.overhead_s)}; step {_ms(comp.projected.step_s)} -> "
                     f"{_ms(c.step(parts))} (measured {_ms(comp.measured.step_s)})")
    lines.append(f"band: +-{band_of(record, 'exact'):.1%} for this workload, +-{band_of(record, 'nearby'):.1%} for "
                 f"nearby configurations (+{NEARBY_SPREAD:.0%}: same model, precision and GPU type, other layout)")
    lines += [f"note: {n}" for n in record.notes]
    return "\n".join(lines)


def format_calibration(comparisons: Sequence[LogComparison], record: CalibrationRecord | None, *,
                       stored: str | None, refused: str | None) -> str:
    blocks = [format_run(c) for c in comparisons]
    if record is not None:
        blocks.append(format_correction(comparisons, record))
    if stored:
        blocks.append(f"stored in {stored}: project, compare, tune and train --projection-only now apply it to "
                      f"{record.workload.label if record else 'this workload'} (and nearby configurations)")
    elif refused is None:
        blocks.append("--dry-run: nothing stored")
    return "\n\n".join(blocks)
