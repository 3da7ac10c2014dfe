"""The memory model against runs that ran: per case projected vs measured, per component, and the error the launch
gate's band (``model.memory.MEMORY_ERROR``) is derived from (``validate.memory_error``).

Run from the repository root (needs ``../shared``)::

    python benchmarks/memory_error.py

Prints (1) the two Primus MI355X logs part by part: what torch allocated (max allocated), what its allocator kept
reserved on top (max reserved - max allocated), what the process held outside torch (hip mem usage - max reserved),
the device total (hip mem usage), each projected vs measured; (2) every piece of evidence (``Evidence``): those logs,
issue 53's MI325X Llama-2-70B FSDP2 run (211 GiB logged), issue 53's Nemotron-4-340B on 128 H100 (ran in 80 GB),
the published runs projected over their capacity; (3) the derived error and ``MEMORY_ERROR``.
"""

from __future__ import annotations

import csv
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
VALIDATION = SHARED / "validation"
CONFIGS = SHARED / "primus_configs"
GIB = 2**30
LOGS = {  # Primus log -> the recipe copied from its argument dump
    "primus-llama3.2-1b-fp8-8xMI355X.log": "primus_llama3.2_1b_fp8_mi355x.yaml",
    "primus-dsv2-lite-fp8-8xMI355X.log": "primus_dsv2_lite_fp8_mi355x.yaml",
}
MI325X_70B = CONFIGS / "examples" / "megatron" / "configs" / "MI325X" / "llama2_70B-BF16-pretrain.yaml"
MI325X_70B_PEAK_BYTES = 211 * GIB
"""Issue 53: "a real MI325X Primus FSDP2 Llama-2-70B run logged 211 GiB peak" (the log is not in ../shared)."""
NEMOTRON_H100 = dict(gpu="H100", precision="BF16", num_gpus="128", tp="8", pp="8", vpp="12", cp="1", dp="2",
                     mbs="1", gbs="32", extra_flags="")
"""Issue 53: NVIDIA's Nemotron-4-340B BF16 on 128 H100 ran; the row is held out, its layout is the one that gives the
issue's 92.2 GiB (TP8 PP8 VPP12, MBS 1; the B200 rows of ../shared run TP8 PP4 VPP12)."""


def _log_cases():
    from primus_ext.logs import read_log
    from primus_ext.model.memory import estimate_memory
    from primus_ext.recipe import load_recipe
    from primus_ext.validate.memory_error import device_used_bytes

    for log_name, recipe_name in LOGS.items():
        path = VALIDATION / "logs" / log_name
        log = read_log(path)
        recipe = load_recipe(REPO / "tests" / "support" / "recipes" / recipe_name, cluster="mi355x", nodes=1,
                             config_roots=[CONFIGS])
        stage = estimate_memory(recipe.model, recipe.execution, recipe.system).stages[0]
        device = max(device_used_bytes(path.read_text(encoding="utf-8", errors="replace")))
        yield log_name, recipe, stage, log, device


def evidence() -> list:
    """Every piece of evidence (``validate.memory_error.Evidence``) this project has."""
    from primus_ext.recipe import load_recipe
    from primus_ext.validate.archs import read_archs
    from primus_ext.validate.memory_error import measured, published_runs, ran
    from primus_ext.validate.runs import run_of

    out = [measured(name, r.model, r.execution, r.system, device) for name, r, _, _, device in _log_cases()]
    r = load_recipe(MI325X_70B, cluster="mi325x", nodes=1, config_roots=[CONFIGS])
    out.append(measured("issue 53: Llama-2-70B FSDP2 MI325X x 8", r.model, r.execution, r.system,
                        MI325X_70B_PEAK_BYTES))
    rows = list(csv.DictReader((VALIDATION / "measured_throughput.csv").open(encoding="utf-8")))
    base = next(row for row in rows if row["model"] == "Nemotron-4-340B")
    run = run_of(len(rows), {**base, **NEMOTRON_H100}, read_archs(VALIDATION / "model_archs.csv"))
    found = ran("issue 53: Nemotron-4-340B BF16 H100 x 128", run.model, run.execution, run.system)
    out += [found] if found else []
    return out + published_runs(VALIDATION / "measured_throughput.csv", VALIDATION / "model_archs.csv")


def components() -> None:
    print("== Primus MI355X logs, rank 0, GiB: projected / measured (error)")
    print(f"{'run':38s} {'allocated':>22s} {'reserved-allocated':>22s} {'outside torch':>22s} {'device total':>22s}")
    for name, _, stage, log, device in _log_cases():
        d = stage.detail
        reserved = max(m.max_reserved_mb for m in log.memory if m.max_reserved_mb is not None) * 2**20
        allocated = log.peak_allocated_bytes
        parts = [(stage.total_bytes - d["other.fragmentation"] - d["other.outside_allocator"], allocated),
                 (d["other.fragmentation"], reserved - allocated), (d["other.outside_allocator"], device - reserved),
                 (stage.total_bytes, device)]
        cells = [f"{p / GIB:6.1f} / {m / GIB:6.1f} ({p / m - 1:+6.1%})" for p, m in parts]
        print(f"{name:38s} " + " ".join(f"{c:>22s}" for c in cells))


def main() -> None:
    from primus_ext.model.memory import MEMORY_ERROR
    from primus_ext.validate.memory_error import derived_error

    components()
    found = evidence()
    print("\n== evidence (error: projected / measured - 1; 'ran': projected / capacity - 1, a lower bound)")
    for e in sorted(found, key=lambda e: -abs(e.error)):
        print(f"  {e.kind:13s} {e.error:+7.1%}  {e.projected_bytes / GIB:7.1f} / {e.reference_bytes / GIB:7.1f} GiB"
              f"  {e.name}")
    print(f"\nderived error {derived_error(found):.1%} (the largest, rounded up to half a percent); "
          f"model.memory.MEMORY_ERROR {MEMORY_ERROR:.1%}")


if __name__ == "__main__":
    main()
