"""Where the projection of published rows spends its step: the diagnosis behind RESULTS.md's error notes.

Run from the repository root::

    python benchmarks/validation_breakdown.py                      # every MoE row (GPT-OSS, Qwen3, ...)
    python benchmarks/validation_breakdown.py --model .            # every row
    python benchmarks/validation_breakdown.py --model 'GPT-OSS' --layers

For each projected row of ``shared/validation/measured_throughput.csv`` whose model matches ``--model`` (a
regular expression; without it, the rows of MoE models): measured vs projected tok/s/GPU with the shipped
(calibrated) profiles, the step split into compute (with launch / MoE overhead), pipeline bubble, optimizer
and each communication's exposed / total seconds. ``--layers`` adds the per-module milliseconds (forward +
backward, no overhead) of one micro-batch of the row's MoE (else dense) layer, and the fixed overhead per
layer pass. In-sample figures: the profiles were fitted on these rows (``primus-ext validate --cv`` gives the
held-out ones).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VALIDATION = REPO.parent / "shared" / "validation"


def _row_line(run, projection) -> str:
    b, e = projection.breakdown, run.execution
    measured = run.measured_tokens_per_sec_per_gpu
    err = (projection.tokens_per_s_per_gpu / measured - 1.0) * 100.0
    comms = " ".join(f"{c.kind} {c.exposed_s:.2f}/{c.total_s:.2f}" for c in b.comms if c.total_s >= 0.005)
    return (f"#{run.index:<4}{run.model_name[:16]:<17}{run.gpu:<7}{run.num_gpus:>4} {run.precision_label[:7]:<8}"
            f"tp{e.tp} pp{e.pp} ep{e.ep} mbs{e.micro_batch_size} gbs{e.global_batch_size} graph={e.cuda_graph}"
            f"  measured {measured:>6.0f} projected {projection.tokens_per_s_per_gpu:>6.0f} {err:+5.0f} %\n"
            f"      step {b.total_s:.2f} s: compute {b.compute_s:.2f} (overhead {b.overhead_s:.2f}) bubble "
            f"{b.bubble_s:.2f} optimizer {b.optimizer_s:.2f}; comm exposed/total: {comms or '-'}")


def _layer_line(run) -> str:
    from primus_ext.model.analytic import fixed_overhead_s, layer_parts
    from primus_ext.model.layers import rank_shapes

    shapes = rank_shapes(run.model, run.execution)
    shape = shapes.get("moe") or shapes["dense"]
    gpu = run.system.gpu
    parts = layer_parts(shape, gpu)
    ms = {k: 1e3 * (parts.fwd.get(k, 0.0) + parts.dgrad.get(k, 0.0) + parts.wgrad.get(k, 0.0))
          for k in {*parts.fwd, *parts.dgrad}}
    listed = " ".join(f"{k} {v:.2f}" for k, v in sorted(ms.items(), key=lambda kv: -kv[1]))
    return (f"      {shape.kind} layer, {shape.tokens} tokens, {shape.local_experts} local experts: {listed} "
            f"= {sum(ms.values()):.2f} ms; + {1e3 * fixed_overhead_s(shape, gpu):.2f} ms per pass")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="regular expression on the model name (default: the MoE models)")
    parser.add_argument("--layers", action="store_true", help="per-module milliseconds of one layer too")
    parser.add_argument("--validation", type=Path, default=VALIDATION, help="folder of the three CSVs")
    args = parser.parse_args(argv)
    try:
        pattern = re.compile(args.model) if args.model is not None else None
    except re.error as exc:
        print(f"error: --model {args.model!r} is not a regular expression: {exc}", file=sys.stderr)
        return 2

    from primus_ext.projection import evaluate
    from primus_ext.validate.archs import read_archs
    from primus_ext.validate.hardware_csv import read_hardware
    from primus_ext.validate.runs import read_runs

    v = args.validation
    runs = read_runs(v / "measured_throughput.csv", read_archs(v / "model_archs.csv"),
                     read_hardware(v / "hardware_specs.csv"))
    shown = 0
    for run in runs:
        if run.model is None or not (pattern.search(run.model_name) if pattern else run.model.is_moe):
            continue
        print(_row_line(run, evaluate(run.model, run.execution, run.system)))
        if args.layers:
            print(_layer_line(run))
        shown += 1
    print(f"{shown} rows (in-sample: the shipped profiles were fitted on them)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
