"""Errors after calibrating from one run of the user's own (``validate``'s one-run offset summary).

    one_run_offset(report)          # each row's error when another row of its model x GPU x precision calibrates it
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from primus_ext.validate.run import RowResult, ValidationReport, summarize


def workload_offset(measured_step_s: float, projected_step_s: float) -> float:
    """The single multiplicative workload offset a user's own measured run implies."""
    if measured_step_s <= 0 or projected_step_s <= 0:
        raise ValueError("step times must be positive")
    return measured_step_s / projected_step_s


def _offset(anchor: RowResult) -> float:
    return anchor.measured_tokens_per_sec_per_gpu / (anchor.projected_tokens_per_sec_per_gpu or 1.0)


def one_run_offset(report: ValidationReport) -> ValidationReport:
    """Errors after calibrating from one run of the user's own, estimated on the validation rows.

    For every model x GPU x precision group with at least two projected rows, each row in turn plays
    the user's one measured run: its measured/projected ratio becomes the workload offset applied to
    the other rows of the group. A row's error is the mean over the anchors it was not one of. Rows of
    single-row groups are skipped (nothing to calibrate from)."""
    groups: dict[str, list[RowResult]] = defaultdict(list)
    for row in report.rows:
        if row.error_pct is not None:
            groups[row.group].append(row)
    sums = {group: sum(_offset(a) for a in members) for group, members in groups.items()}
    out: list[RowResult] = []
    for row in report.rows:
        anchors = len(groups.get(row.group, ())) - 1  # the row itself is one of its group's members
        if row.error_pct is None or anchors < 1:
            reason = row.skipped_reason or "no other row of its model x GPU x precision to calibrate from"
            out.append(replace(row, projected_tokens_per_sec_per_gpu=None, error_pct=None, skipped_reason=reason))
            continue
        # mean over anchors of (p * m_a / p_a - m) / m = (p / m) * mean(m_a / p_a) - 1: one sum per group, not one
        # per row (a group of 2 000 rows took 1.4 CPU-s over all pairs)
        ratios = sums[row.group] - _offset(row)
        error = 100.0 * ((row.projected_tokens_per_sec_per_gpu or 0.0) / row.measured_tokens_per_sec_per_gpu
                         * ratios / anchors - 1.0)
        projected = row.measured_tokens_per_sec_per_gpu * (1 + error / 100.0)
        out.append(replace(row, projected_tokens_per_sec_per_gpu=projected, error_pct=error))
    return ValidationReport(rows=tuple(out), summary=summarize(out), label=f"{report.label} + one-run offset")
