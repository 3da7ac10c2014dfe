"""AMD Instinct boards calibrated on AMD runs only, checked on rows they were not fitted on (issue 45).

Run from the repository root (``../shared/validation`` beside it)::

    python benchmarks/amd_calibration.py [--json OUT] [--write-profiles DIR]

AMD rows: the 22 MLPerf Training Llama 2 70B LoRA submissions of ``mlperf_training.csv`` (MI300X, MI325X, MI355X);
AMD's published Primus rows of ``measured_throughput.csv`` whose only gap is the global batch, at PP 1 (the batch
then only sets how often gradients are reduced: assumed 16 micro-batches per rank, said in the output); the two real
Primus logs on 8 x MI355X (``logs/``, projected from ``tests/support/recipes``), both run on node mi355-gpu-26
(``index.csv``). Prints, each against the measured tokens/s/GPU:

1. before: the shipped profiles as they were (the pooled NVIDIA prior on every AMD board);
2. each board fitted on its own rows (``validate.amd``), in sample, and the data's own ceiling: rows of one
   configuration run by several systems, each against the mean of the others (what no projection can beat);
3. leave-one-submission-out and leave-one-GPU-out (``validate.holdout``);
4. the two logs: projected with the MI355X board fit (no log used), then with the links of their cluster fitted
   on one log and checked on the other (``validate.amd.fit_environment``), with each step's breakdown;
5. the band ``project`` prints for each log (``validate.bands``: the class's held-out error from the other models'
   rows, widened where the sensitivity band is wider) and whether it holds the measured value (``--bands-only``: this
   part alone);
6. ``--write-profiles DIR``: the AMD profiles with their fitted blocks, MI350X carried from MI355X, and each
   board's ``band`` set to its held-out error.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VALIDATION = REPO.parent / "shared" / "validation"
ASSUMED_ACCUMULATION = 16
"""Micro-batches per rank per step assumed for an AMD Primus row that states no global batch (PP 1 rows only)."""
LOGS = {  # recipe stem -> log file (both on node mi355-gpu-26, index.csv)
    "primus_llama3.2_1b_fp8_mi355x": "primus-llama3.2-1b-fp8-8xMI355X.log",
    "primus_dsv2_lite_fp8_mi355x": "primus-dsv2-lite-fp8-8xMI355X.log",
}
ENVIRONMENT = "environment=mi355-gpu-26"


def _primus_rows(archs):
    """AMD rows of measured_throughput.csv complete but for the global batch, at PP 1, with the batch assumed."""
    from primus_ext.validate.runs import read_runs

    rows = list(csv.DictReader((VALIDATION / "measured_throughput.csv").open(encoding="utf-8")))
    picked = [r for r in rows if r["gpu"].upper().startswith("MI") and r["mbs"] and r["dp"] and r["seq_len"]
              and r["precision"] and not r["gbs"] and (r["pp"] or "1") == "1"]
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(rows[0]))
    writer.writeheader()
    for r in picked:
        writer.writerow({**r, "gbs": str(int(r["mbs"]) * int(r["dp"]) * ASSUMED_ACCUMULATION)})
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder) / "rows.csv"
        scratch.write_text(text.getvalue(), encoding="utf-8")
        runs = read_runs(scratch, archs)
    note = f"global batch assumed: {ASSUMED_ACCUMULATION} micro-batches per rank (not stated by the source)"
    return [replace(r, index=1000 + i, assumptions=(*r.assumptions, note)) for i, r in enumerate(runs)
            if r.model is not None]


def log_rows():
    """The two Primus logs as rows: their recipes' specs, the logs' median stable step."""
    from primus_ext.logs import read_log
    from primus_ext.recipe import load_recipe
    from primus_ext.validate.runs import RunRow

    out = []
    for i, (stem, log_name) in enumerate(LOGS.items()):
        recipe = load_recipe(REPO / "tests" / "support" / "recipes" / f"{stem}.yaml", cluster="mi355x", nodes=1,
                             config_roots=[VALIDATION.parent / "primus_configs"])
        log = read_log(VALIDATION / "logs" / log_name)
        ex = recipe.execution
        tokens = ex.global_batch_size * ex.seq_length / recipe.system.world_size / log.stats.median_s
        out.append(RunRow(index=2000 + i, model_name=recipe.model.name, gpu="MI355X",
                          num_gpus=recipe.system.world_size, precision_label=ex.precision,
                          measured_tokens_per_sec_per_gpu=tokens, model=recipe.model, execution=ex,
                          system=recipe.system, assumptions=(ENVIRONMENT, f"log {log_name}")))
    return out


def _err(projected: float, measured: float) -> float:
    return (projected / measured - 1.0) * 100.0


def _summary(errors: list[float]) -> dict:
    a = sorted(abs(e) for e in errors)
    if not a:
        return {"n": 0}
    p90 = a[min(len(a) - 1, math.ceil(0.9 * len(a)) - 1)]
    return {"n": len(a), "median_abs_pct": round(statistics.median(a), 2), "p90_abs_pct": round(p90, 2),
            "max_abs_pct": round(a[-1], 2)}


def _line(label: str, s: dict) -> str:
    if not s.get("n"):
        return f"  {label:<44} (no rows)"
    return (f"  {label:<44} {s['n']:>3} rows  |error| median {s['median_abs_pct']:5.2f} %  p90 "
            f"{s['p90_abs_pct']:5.2f} %  max {s['max_abs_pct']:5.2f} %")


def noise_floor(rows) -> dict:
    """Each row of a configuration several systems ran against the mean of the others: the leave-one-out error a
    projection that is any function of the configuration cannot beat."""
    groups: dict[str, list] = {}
    for r in rows:
        groups.setdefault(repr((r.model, r.execution, r.system.name)), []).append(r)
    errors, spreads = [], {}
    for members in groups.values():
        if len(members) < 2:
            continue
        values = [m.measured_tokens_per_sec_per_gpu for m in members]
        spreads[members[0].gpu] = round((max(values) - min(values)) / statistics.median(values) * 100, 2)
        for i, v in enumerate(values):
            others = values[:i] + values[i + 1:]
            errors.append(_err(sum(others) / len(others), v))
    return {**_summary(errors), "spread_pct_by_gpu": spreads}


def _breakdown(projection) -> dict:
    b = projection.breakdown
    return {"step_ms": round(projection.step_time_s * 1e3, 1), "compute_ms": round(b.compute_s * 1e3, 1),
            "exposed_comm_ms": {c.kind: round(c.exposed_s * 1e3, 1) for c in b.comms if c.exposed_s > 0},
            "optimizer_ms": round(b.optimizer_s * 1e3, 1), "bubble_ms": round(b.bubble_s * 1e3, 1)}


def step_parts(run) -> dict:
    """Seconds per step of each kernel class, the fixed per-layer costs and what the host floor adds
    (``model.roofline.kernel_classes_s``), for the busiest stage of a PP 1 row."""
    from primus_ext.model.breakdown import kernel_classes_s
    from primus_ext.model.layers import rank_shapes
    from primus_ext.model.stages import pipeline_plan

    model, ex, gpu = run.model, run.execution, run.system.gpu
    stage = pipeline_plan(model, ex)[0]
    micro = ex.global_batch_size // (ex.micro_batch_size * ex.data_parallel_size)
    counts = {"dense": stage.dense_layers(model), "moe": stage.moe_layers(model), "embedding": 1, "output": 1}
    sums: dict[str, float] = {}
    for kind, shape in rank_shapes(model, ex).items():
        for name, seconds in kernel_classes_s(shape, gpu).items():
            sums[name] = sums.get(name, 0.0) + micro * counts.get(kind, 0) * seconds
    return {k: round(v * 1e3, 1) for k, v in sums.items()}


def log_bands(logs) -> dict:
    """The band ``project`` prints for each log's recipe on the shipped MI355X profile (uncalibrated), and whether the
    log's measured tokens/s/GPU falls inside it (issue 53)."""
    from primus_ext.validate.bands import coverage_lines, with_bands
    from primus_ext.validate.run import analytic_projector, validate_runs

    report = with_bands(validate_runs(logs, analytic_projector, label="the two MI355X logs, shipped profile"), logs)
    out = {}
    for r in report.rows:
        band = r.band
        assert band is not None and r.projected_tokens_per_sec_per_gpu is not None and r.error_pct is not None
        ev = band.evidence
        out[r.model] = {"measured": round(r.measured_tokens_per_sec_per_gpu, 1),
                        "projected": round(r.projected_tokens_per_sec_per_gpu, 1), "error_pct": round(r.error_pct, 1),
                        "band": [round(band.low, 1), round(band.high, 1)], "inside": band.inside,
                        "evidence": f"{ev['level']}, n {ev['n']} ({ev['class']['family']} {ev['class']['type']} "
                                    f"{ev['class']['precision']} {ev['class']['scale']})"}
        print(f"  {r.model:<20} measured {r.measured_tokens_per_sec_per_gpu:>8,.0f}  projected "
              f"{r.projected_tokens_per_sec_per_gpu:>8,.0f} ({r.error_pct:+.0f} %)  band {band.low:,.0f} .. "
              f"{band.high:,.0f}: {'inside' if band.inside else 'OUTSIDE'}  [evidence: {out[r.model]['evidence']}]")
    print("\n".join(coverage_lines(report)))
    assert report.coverage is not None
    return {"rows": out, "inside": report.coverage.inside, "n": report.coverage.n}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the figures as JSON to this file")
    parser.add_argument("--write-profiles", metavar="DIR", help="write the AMD profiles with their fitted blocks")
    parser.add_argument("--bands-only", action="store_true", help="only part 5: the band on the two logs")
    args = parser.parse_args(argv)
    if args.bands_only:
        print("5. the band project prints on the two MI355X logs (uncalibrated, shipped profile)")
        log_bands(log_rows())
        return 0

    from primus_ext.projection import evaluate
    from primus_ext.validate.amd import apply_all, fit_all, fit_amd, fit_environment
    from primus_ext.validate.archs import read_archs
    from primus_ext.validate.efficiency_fit import with_efficiency
    from primus_ext.validate.hardware_csv import read_hardware
    from primus_ext.validate.holdout import leave_one_out
    from primus_ext.validate.run import analytic_projector
    from primus_ext.validate.runs import read_runs

    archs = read_archs(VALIDATION / "model_archs.csv")
    mlperf = [r for r in read_runs(VALIDATION / "mlperf_training.csv", archs,
                                   read_hardware(VALIDATION / "hardware_specs.csv")) if r.model is not None]
    amd_mlperf = [r for r in mlperf if r.system.gpu.vendor == "amd"]
    primus = _primus_rows(archs)
    logs = log_rows()
    amd = amd_mlperf + primus
    out: dict = {"assumptions": {"primus_rows": [f"#{r.index - 1000}: {r.model_name} {r.gpu}" for r in primus],
                                 "accumulation": ASSUMED_ACCUMULATION}}

    def errors(rows, efficiency_of=None):
        found = []
        for r in rows:
            run = with_efficiency(r, efficiency_of(r)) if efficiency_of else r
            found.append(_err(analytic_projector(run), r.measured_tokens_per_sec_per_gpu))
        return found

    print("1. the shipped profiles as they are (before issue 45: the pooled NVIDIA prior on every AMD board)")
    before = {"mlperf": _summary(errors(amd_mlperf)), "primus": _summary(errors(primus)),
              "logs": dict(zip([r.model_name for r in logs], (round(e, 1) for e in errors(logs)), strict=True))}
    print(_line("MLPerf AMD rows", before["mlperf"]))
    print(_line("Primus rows (global batch assumed)", before["primus"]))
    print(f"  logs: {before['logs']}")
    out["before"] = before

    fits = fit_amd(amd, analytic_projector, label="mlperf_training.csv + measured_throughput.csv (AMD rows)")
    print("\n2. each AMD board fitted on its own rows (in sample)")
    for board, fit in fits.items():
        e = fit.efficiency
        print(f"  {board}: {fit.rows} rows, {fit.configurations} configurations, knobs {', '.join(fit.knobs)}: "
              f"gemm_max {e.gemm_max:.4f} fp8_gemm_max {e.fp8_gemm_max:.4f} attention {e.attention:.4f} "
              f"scaleup_link {e.scaleup_link:.4f}  mean |log error| {fit.loss:.4f}")
    board_eff = {b: f.efficiency for b, f in fits.items()}
    in_sample = errors(amd, lambda r: board_eff[r.system.name])
    floor = noise_floor(amd_mlperf)
    print(_line("in sample, AMD rows", _summary(in_sample)))
    print(_line("data ceiling (each row vs the others)", floor) + f"  spread by GPU {floor['spread_pct_by_gpu']}")
    out["fits"] = {b: {"rows": f.rows, "configurations": f.configurations, "knobs": list(f.knobs), "loss": f.loss,
                       **{k: getattr(f.efficiency, k) for k in ("gemm_max", "fp8_gemm_max", "attention",
                                                                 "scaleup_link")}} for b, f in fits.items()}
    out["in_sample"], out["noise_floor"] = _summary(in_sample), floor

    print("\n3. held out (the fit never saw the row / the board)")
    held: dict = {}
    for by in ("submission", "gpu"):
        report = leave_one_out(amd, analytic_projector, by=by)
        errs = [r.error_pct for r in report.rows if r.error_pct is not None]
        mlperf_errs = [r.error_pct for r in report.rows if r.error_pct is not None and r.index < 1000]
        held[by] = {"all": _summary(errs), "mlperf": _summary(mlperf_errs),
                    "by_gpu": {g: _summary([r.error_pct for r in report.rows if r.gpu == g and r.error_pct is not None])
                               for g in sorted({r.gpu for r in report.rows})},
                    "rows": [{"index": r.index, "gpu": r.gpu, "model": r.model, "error_pct": r.error_pct}
                             for r in report.rows]}
        print(_line(f"leave-one-{by}-out, all AMD rows", held[by]["all"]))
        print(_line(f"leave-one-{by}-out, MLPerf rows", held[by]["mlperf"]))
        for gpu, s in held[by]["by_gpu"].items():
            print(_line(f"  {gpu}", s))
    out["held_out"] = held

    print("\n4. the two MI355X logs (node mi355-gpu-26)")
    mi355 = board_eff["mi355x"]
    log_report: dict = {"board_fit": {}, "environment": {}}
    for r in logs:
        p = evaluate(r.model, r.execution, with_efficiency(r, mi355).system)
        log_report["board_fit"][r.model_name] = {"error_pct": round(_err(p.tokens_per_s_per_gpu,
                                                                             r.measured_tokens_per_sec_per_gpu), 1),
                                                 **_breakdown(p)}
        print(f"  MI355X board fit, no log used: {r.model_name:<20} {log_report['board_fit'][r.model_name]}")
        parts = step_parts(with_efficiency(r, mi355))
        log_report["board_fit"][r.model_name]["kernel_classes_ms"] = parts
        print(f"    kernel classes per step (ms): {parts}")
    for label, train in (("both logs", logs), *((f"{r.model_name} log only", [r]) for r in logs)):
        env, _ = fit_environment(train, analytic_projector, mi355)
        link_rate = env.scaleup_link * logs[0].system.gpu.scaleup_bandwidth_bytes_per_s
        entry = {"scaleup_link": round(env.scaleup_link, 4), "overlap": round(env.overlap, 4),
                 "effective_gb_per_s": round(link_rate / 1e9, 1)}
        for row in logs:
            p = evaluate(row.model, row.execution, with_efficiency(row, env).system)
            entry[row.model_name] = {"error_pct": round(_err(p.tokens_per_s_per_gpu,
                                                             row.measured_tokens_per_sec_per_gpu), 1),
                                     "in_fit": row in train, **_breakdown(p)}
        log_report["environment"][label] = entry
        print(f"  links fitted on {label}: scaleup_link {entry['scaleup_link']} ({entry['effective_gb_per_s']} GB/s "
              f"per GPU and direction), overlap {entry['overlap']}")
        for row in logs:
            e = entry[row.model_name]
            print(f"    {row.model_name:<20} {e['error_pct']:+6.1f} %  {'(fitted)' if e['in_fit'] else '(held out)'}  "
                  f"step {e['step_ms']} ms: compute {e['compute_ms']}, exposed comm {e['exposed_comm_ms']}")
    out["logs"] = log_report
    print("\n5. the band project prints on the two MI355X logs (uncalibrated, shipped profile)")
    out["log_bands"] = log_bands(logs)

    if args.write_profiles:
        _write(fits, held, Path(args.write_profiles))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=float) + "\n", encoding="utf-8")
    _ = (fit_all, apply_all)  # the fold fit and its application (validate.holdout) are the ones printed above
    return 0


def _write(fits, held, folder: Path) -> None:
    """The AMD profiles with their fitted block; ``band`` = the board's worst held-out error (submission folds), for
    MI350X (no rows) the worst leave-one-GPU-out error of its family sibling; MI250X (no rows, another generation) the
    block of the board with the most rows, its band the larger of that board's and the worst leave-one-GPU-out error."""
    from primus_ext.hardware import load_gpu, profile_text, write_profiles
    from primus_ext.validate.amd import carry_to_sibling

    names = ["gemm_max", "fp8_gemm_max", "attention", "band"]

    def worst(gpu: str) -> float:
        """The board's worst held-out error, a row or the whole board held out (its calibration rests on one to three
        configurations: how far it carries to another is what the board-out folds measure)."""
        found = [held[by]["by_gpu"].get(gpu, {}).get("max_abs_pct", 0.0) for by in ("submission", "gpu")]
        return round(max(0.10, *(f / 100 for f in found)), 3)

    texts = {}
    for board, fit in fits.items():
        eff = replace(fit.efficiency, band=worst(board.upper()), calibration=fit.efficiency.calibration
                      + f"; band {worst(board.upper()):.3f} = its worst held-out error (benchmarks/amd_calibration.py)")
        texts[board] = profile_text(board, eff, names)
    if "mi355x" in fits:
        carried = carry_to_sibling(fits["mi355x"].efficiency, load_gpu("mi355x"), load_gpu("mi350x"))
        carried = replace(carried, band=worst("MI355X"), calibration=(
            fits["mi355x"].efficiency.calibration + "; carried to MI350X by the sustained-clock ratio "
            f"(validate.amd.carry_to_sibling); band {worst('MI355X'):.3f} = MI355X's worst held-out error"))
        texts["mi350x"] = profile_text("mi350x", carried, names)
    if fits:  # MI250X (CDNA 2, no rows): another generation takes the board with the most rows as it is (validate.amd)
        source = max(fits, key=lambda b: fits[b].rows)
        out_worst = max(v.get("max_abs_pct", 0.0) for v in held["gpu"]["by_gpu"].values()) / 100
        band = round(max(worst(source.upper()), out_worst), 3)
        texts["mi250x"] = profile_text("mi250x", replace(fits[source].efficiency, band=band, calibration=(
            fits[source].efficiency.calibration + f"; carried to MI250X as they are (another generation: the AMD board "
            f"with the most rows, validate.amd); no MI250X run or kernel measurement; band {band:.3f} = "
            f"max({source.upper()}'s band, the worst leave-one-GPU-out error)")), names)
    for path in write_profiles(texts, folder):
        print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
