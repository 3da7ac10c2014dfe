"""Out-of-sample check of the pooled efficiency prior on the AMD rows of the development set.

Run from the repository root::

    python benchmarks/amd_prior_check.py

Since issue 45 the AMD profiles carry fits on AMD rows only (``benchmarks/amd_calibration.py``, which also uses
these rows); this script now checks the shipped profiles, whatever they hold. Before: no AMD row of
``shared/validation/measured_throughput.csv`` is complete (``validate`` skips them: GBS or
precision not stated), so no AMD family has an efficiency fit of its own; their profiles carry the prior
that ``primus-ext validate --fit --write-profiles`` fits on all NVIDIA rows together
(``validate.efficiency_fit.fit_pooled``). The rows whose only gap is the global batch can still check it: with
PP=1 the batch only sets how often gradients are reduced, so the projection barely moves with it. For each
such row this prints the projection under the shipped profile (the prior) and under the plain defaults of
``specs.Efficiency``, for global batches of 4, 16 and 64 micro-batches per rank, against the measurement.
Rows with PP > 1 are shown too, but there the assumed batch sets the bubble: read them as a range.
"""

from __future__ import annotations

import csv
import io
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VALIDATION = REPO.parent / "shared" / "validation"
ACCUMULATION = (4, 16, 64)
"""Micro-batches per rank per step assumed for the unstated global batch."""


def main() -> int:
    from primus_ext.specs import Efficiency
    from primus_ext.validate.archs import read_archs
    from primus_ext.validate.efficiency_fit import with_efficiency
    from primus_ext.validate.run import analytic_projector
    from primus_ext.validate.runs import read_runs

    path = VALIDATION / "measured_throughput.csv"
    rows = list(csv.DictReader(path.open(encoding="utf-8")))
    amd = [i for i, r in enumerate(rows) if r["gpu"].upper().startswith("MI") and r["mbs"] and r["dp"]
           and r["seq_len"] and r["precision"] and not r["gbs"]]
    archs = read_archs(VALIDATION / "model_archs.csv")
    print("AMD rows complete but for the global batch; projected tok/s/GPU (error vs measured)")
    print(f"{'row':>4} {'model':<15} {'gpu':<7} {'PP':>2} {'GA':>3} {'measured':>9} {'prior':>15} {'defaults':>15}")
    for k in ACCUMULATION:
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=list(rows[0]))
        writer.writeheader()
        for i in amd:
            writer.writerow({**rows[i], "gbs": str(int(rows[i]["mbs"]) * int(rows[i]["dp"]) * k)})
        with tempfile.TemporaryDirectory() as folder:
            scratch = Path(folder) / "rows.csv"
            scratch.write_text(text.getvalue(), encoding="utf-8")
            runs = read_runs(scratch, archs)
        for i, run in zip(amd, runs, strict=True):
            if run.model is None:
                print(f"{i:>4} skipped: {run.skipped_reason}")
                continue
            measured = run.measured_tokens_per_sec_per_gpu
            prior = analytic_projector(run)
            plain = analytic_projector(with_efficiency(run, replace(Efficiency(), calibration="defaults")))
            print(f"{i:>4} {run.model_name:<15} {run.gpu:<7} {run.execution.pp:>2} {k:>3} {measured:>9.0f} "
                  f"{prior:>7.0f} ({prior / measured - 1:+.0%}) {plain:>7.0f} ({plain / measured - 1:+.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
