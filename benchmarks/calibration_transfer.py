"""How far a calibration carries: one run's correction applied to other configurations of the same model.

    python benchmarks/calibration_transfer.py            # every model x GPU x precision group with >= 2 configs

For each projected row of ``shared/validation/measured_throughput.csv`` the correction ``primus-ext calibrate``
would store from that one run (``calibration.fit_correction``: a kernel factor, no overhead from one run) is
applied to every *other* row of the same model, GPU type and precision with a different configuration (layout,
batch, GPU count): the ``nearby`` case of ``calibration.apply``. Printed: the median and 75th percentile of the
relative error of those transferred projections, against the same rows' uncalibrated error. The median sets
``calibration.apply.NEARBY_SPREAD`` (the extra band a nearby configuration gets). The projection uses the
shipped profiles (fitted on these rows: the uncalibrated error is in-sample; the transfer error is not, since
each correction comes from one other row).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VALIDATION = REPO.parent / "shared" / "validation"


def _step_of(run, tokens_per_s_per_gpu: float) -> float:
    e = run.execution
    return e.global_batch_size * e.seq_length / tokens_per_s_per_gpu / run.num_gpus


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--validation", type=Path, default=VALIDATION, help="folder of the three CSVs")
    args = parser.parse_args(argv)

    from primus_ext.calibration.apply import parts_of
    from primus_ext.calibration.correction import CorrectionError, StepParts, fit_correction
    from primus_ext.errors import PrimusExtError
    from primus_ext.projection import evaluate
    from primus_ext.validate.archs import read_archs
    from primus_ext.validate.hardware_csv import read_hardware
    from primus_ext.validate.runs import read_runs

    v = args.validation
    runs = read_runs(v / "measured_throughput.csv", read_archs(v / "model_archs.csv"),
                     read_hardware(v / "hardware_specs.csv"))
    groups: dict[tuple[str, str, str], list[tuple[object, StepParts, float, str]]] = defaultdict(list)
    for run in runs:
        if run.model is None:
            continue
        try:
            p = evaluate(run.model, run.execution, run.system)
        except PrimusExtError:
            continue
        measured = _step_of(run, run.measured_tokens_per_sec_per_gpu)
        config = f"{run.execution}{run.num_gpus}"
        groups[(run.model_name, run.gpu, run.precision_label)].append((run, parts_of(p.breakdown, p.mfu), measured,
                                                                       config))
    transfer, plain, pairs, used = [], [], 0, 0
    for members in groups.values():
        if len({m[3] for m in members}) < 2:
            continue
        used += 1
        for i, (_, parts_i, measured_i, config_i) in enumerate(members):
            try:
                correction = fit_correction([parts_i], [measured_i])
            except CorrectionError:
                continue
            for j, (_, parts_j, measured_j, config_j) in enumerate(members):
                if i == j or config_i == config_j:
                    continue
                pairs += 1
                transfer.append(abs(correction.step(parts_j) / measured_j - 1.0))
                plain.append(abs(parts_j.step_s / measured_j - 1.0))
    if not transfer:
        print("no group with two configurations")
        return 1

    def q(values: list[float], p: float) -> float:
        return statistics.quantiles(values, n=100)[int(p) - 1] if len(values) > 1 else values[0]

    print(f"{used} model x GPU x precision groups with >= 2 configurations, {pairs} (calibrating row, other row) "
          "pairs")
    print(f"  calibrated from one other configuration: median |error| {statistics.median(transfer):.1%}, "
          f"p75 {q(transfer, 75):.1%}")
    print(f"  uncalibrated (same rows, in-sample):     median |error| {statistics.median(plain):.1%}, "
          f"p75 {q(plain, 75):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
