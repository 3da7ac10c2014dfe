"""One leave-one-model-out fold, opened up: the efficiencies fitted without a model and its rows' errors.

Run from the repository root (about 1.5 min on 2 cores)::

    python benchmarks/fold_fit.py                        # the Llama3.1-8B fold
    python benchmarks/fold_fit.py Qwen3-30B-A3B --also Llama3.1-70B

``primus-ext validate --cv`` reports each fold's rows only; this prints what the fold fitted per GPU family
(the parameters that moved to make the other models fit) and the signed error of the held-out model's rows,
and of any ``--also`` model's rows (in-sample for the fold), with those parameters.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from primus_ext.validate.archs import read_archs
from primus_ext.validate.efficiency_fit import DEFAULT_PARAMS, apply_fits, fit_by_gpu, usable
from primus_ext.validate.hardware_csv import read_hardware
from primus_ext.validate.run import analytic_projector
from primus_ext.validate.runs import read_runs

VALIDATION = Path(__file__).resolve().parents[2] / "shared" / "validation"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="Llama3.1-8B", help="the model held out")
    parser.add_argument("--also", action="append", default=[], help="another model whose rows to print")
    parser.add_argument("--validation", default=str(VALIDATION), help="folder of the three CSVs")
    args = parser.parse_args()
    folder = Path(args.validation)
    runs = read_runs(folder / "measured_throughput.csv", read_archs(folder / "model_archs.csv"),
                     read_hardware(folder / "hardware_specs.csv"))
    fits = fit_by_gpu([r for r in usable(runs) if r.model_name != args.model], analytic_projector)
    for family, (eff, rows, loss) in fits.items():
        values = " ".join(f"{p.name}={getattr(eff, p.name):.4g}" for p in DEFAULT_PARAMS)
        print(f"{family}: {rows} rows, mean |log error| {loss:.4f}\n  {values}")
    shown = [r for r in usable(runs) if r.model_name in (args.model, *args.also)]
    for run in apply_fits(shown, fits):
        error = analytic_projector(run) / run.measured_tokens_per_sec_per_gpu - 1.0
        print(f"#{run.index:<4} {run.model_name:<18} {run.gpu:<6} {run.precision_label[:24]:<24} {error:+7.1%}")


if __name__ == "__main__":
    main()
