"""Hostile generators for the input surfaces of issue 56 part 1: CI suites + baselines (``ci``), and trial logs
read by ``tune --resume`` (``trials``) here; GPU profiles, validation CSVs and log fields in ``hostile_files.py``; the
environment, standard streams, output paths and the LLM endpoint in ``hostile_env.py`` (``SURFACES`` names them
all). Each returns a ``hostile_cases.Case``; the campaign runs one surface alone
with ``benchmarks/hostile_campaign.py --surface ci`` (or ``trials``).

Structure (nesting, lists where mappings go, keys repeated), sizes (100 000 entries or lines, a sparse 1 TiB file),
encodings (a BOM, invalid UTF-8, NUL bytes), numbers at every edge (5 001 digits, ``1e999``, ``NaN``, negative,
booleans) and files that are not files (a FIFO, a folder, ``/proc/self/status``).
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from pathlib import Path

from hostile_cases import Case, _copy_recipe, _presets

HUGE_INT = "9" * 5001
DEEP = "[" * 100_000 + "]" * 100_000


def _edge_number(rng: random.Random) -> str:
    return rng.choice((HUGE_INT, "1e999", "-1e999", "NaN", "Infinity", "-1", "0", "true", "null", '"fast"', "[]",
                       "{}", "1e-320", "-0.0", "4.5e15"))


def _not_a_file(rng: random.Random, path: Path) -> Path | None:
    """``path`` made a FIFO or a folder, or a pseudo-file path returned instead; None: leave it a file."""
    kind = rng.choice(("fifo", "folder", "proc", "sparse", None, None, None))
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "proc":
        return Path("/proc/self/status")
    elif kind == "sparse":
        with open(path, "wb") as fh:
            fh.truncate(1 << 40)
    else:
        return None
    return path


def _baseline_text(rng: random.Random, name: str) -> str:
    kind = rng.choice(("deep", "number", "list", "entries-list", "many", "dup", "bom", "bytes", "empty", "kind",
                       "nested"))
    figure = rng.choice(("tokens_per_s_per_gpu", "peak_memory_gib", "mfu", "step_time_s"))
    if kind == "deep":
        return '{"entries": ' + DEEP[:rng.choice((2000, 200_000))] + "}"
    if kind == "number":
        return f'{{"entries": {{"{name}": {{"{figure}": {_edge_number(rng)}}}}}}}'
    if kind == "list":
        return "[1, 2, 3]"
    if kind == "entries-list":
        return '{"entries": [{"a": 1}]}'
    if kind == "many":
        return json.dumps({"entries": {f"e{i}": {figure: i} for i in range(100_000)}})
    if kind == "dup":
        return f'{{"entries": {{"{name}": {{"{figure}": 1}}, "{name}": {{"{figure}": "x"}}}}}}'
    if kind == "bom":
        return "\ufeff" + json.dumps({"entries": {name: {figure: 1.0}}})
    if kind == "bytes":
        return "".join(chr(rng.randrange(1, 0x2FF)) for _ in range(2000)) + "\x00"
    if kind == "empty":
        return ""
    if kind == "kind":
        return json.dumps({"kind": rng.choice(("ci", None, 7, [])), "entries": {}})
    return json.dumps({"entries": {name: {figure: {"value": 1}}}})


def _suite_text(rng: random.Random, recipe: Path) -> str:
    entry = {"recipe": str(recipe), "cluster": "h100", "nodes": 1}
    kind = rng.choice(("plain", "plain", "nodes", "tolerance", "measured", "name", "many"))
    if kind == "nodes":
        entry["nodes"] = rng.choice((0, -1, 10**30, [1, 1], list(range(1, 2000)), "8", 1.5, True))
    elif kind == "tolerance":
        entry["tolerance"] = {"throughput_pct": rng.choice((-1, float("nan"), 1e308, "2")), "memory_gib": 0.5}
    elif kind == "measured":
        entry["measured"] = {"tokens_per_s_per_gpu": rng.choice((0, -5, 1e308, "x")), "tolerance_pct": 5}
    elif kind == "name":
        entry["name"] = rng.choice(("x" * 100_000, "", "a/b\n", 7))
    entries = [entry] * (rng.choice((200, 5000)) if kind == "many" else 1)
    return json.dumps({"suite": "s", "entries": entries})  # JSON is YAML


def ci_suites(rng: random.Random, folder: Path) -> Case:
    """``ci`` over a one-entry suite with a hostile baseline, or a hostile suite with a valid baseline."""
    recipe = _copy_recipe(folder)
    suite, baseline = folder / "suite.yaml", folder / "baseline.json"
    name = "recipe@h100/1n"
    hostile_suite = rng.random() < 0.4
    suite.write_text(_suite_text(rng, recipe) if hostile_suite else _suite_text(random.Random(0), recipe))
    if hostile_suite:
        baseline.write_text(json.dumps({"entries": {name: {"tokens_per_s_per_gpu": 1000.0}}}))
    else:
        swapped = _not_a_file(rng, baseline)
        if swapped is None:
            baseline.write_text(_baseline_text(rng, name))
        baseline = swapped or baseline
    argv = ["ci", str(suite), "--baseline", str(baseline), "--json", str(folder / "ci.json")]
    kept = baseline.is_file() and not str(baseline).startswith("/proc/")  # /proc/self/status changes by itself
    inputs = [recipe, suite, *_presets(folder)] + ([baseline] if kept else [])
    return Case(f"ci/{'suite' if hostile_suite else 'baseline'}", argv, folder, inputs=inputs)


def _trial_line(rng: random.Random, *, short: bool = False) -> str:
    """One hostile trial line; ``short``: none of the 3 MB or 200 000-bracket ones (a log of 100 000 lines)."""
    kinds = ("config-types", "number", "list", "status", "missing") + (() if short else ("deep", "long"))
    kind = rng.choice(kinds)
    config = {"tensor_model_parallel_size": 1, "micro_batch_size": 1}
    if kind == "config-types":
        config["tensor_model_parallel_size"] = rng.choice(([1], {"a": 1}, "x" * 100, -1, 10**18, True))
        return json.dumps({"trial": {"config": config, "status": "projected", "origin": "tpe"}})
    if kind == "number":
        return f'{{"trial": {{"config": {{"micro_batch_size": {_edge_number(rng)}}}, "status": "projected"}}}}'
    if kind == "deep":
        return '{"trial": ' + DEEP[:rng.choice((2000, 200_000))] + "}"
    if kind == "list":
        return json.dumps([{"trial": {"config": config}}])
    if kind == "long":
        return json.dumps({"trial": {"config": config, "status": "projected", "origin": "x" * 3_000_000}})
    if kind == "status":
        return json.dumps({"trial": {"config": config, "status": rng.choice((None, 7, "best", []))}})
    return json.dumps({"trial": {}})


def trial_logs(rng: random.Random, folder: Path) -> Case:
    """``tune --resume`` of a trial log with a hostile header or trial lines (or not a file at all)."""
    recipe = _copy_recipe(folder)
    log = folder / "trials.jsonl"
    header = {"header": {"recipe": str(recipe), "cluster": "h100", "nodes": 1, "margin": 0.05, "pins": {}},
              "version": 1}
    kind = rng.choice(("header", "lines", "lines", "many", "bytes", "file"))
    if kind == "header":
        header = rng.choice(({"header": [1, 2]}, {"header": {"pins": [1]}}, {"header": None}, [header],
                             {"header": {"nodes": HUGE_INT}}))
        huge = isinstance(header, dict) and isinstance(header.get("header"), dict) and "nodes" in header["header"]
        lines = [json.dumps(header).replace(f'"{HUGE_INT}"', HUGE_INT) if huge else json.dumps(header)]
    elif kind == "many":
        count = rng.choice((1000, 100_000))
        lines = [json.dumps(header)] + [_trial_line(random.Random(i), short=True) for i in range(count)]
    else:
        lines = [json.dumps(header)] + [_trial_line(rng) for _ in range(rng.randint(1, 5))]
    swapped = _not_a_file(rng, log) if kind == "file" else None
    if swapped is not None:
        log = swapped
    elif kind == "bytes":
        log.write_bytes("\n".join(lines).encode() + b"\n\xff\xfe\x00garbage\n")
    else:
        log.write_text("\n".join(lines) + rng.choice(("\n", "")))
    argv = ["tune", str(recipe), "--cluster", "h100", "--nodes", "1", "--budget", "3", "--no-regret",
            "--strategy", "tpe", "--resume", str(log)]
    return Case(f"trials/{kind}", argv, folder, inputs=[recipe, *_presets(folder)])


# the other surfaces build on the helpers above (imported here, once those exist)
from hostile_env import environment, llm_endpoint, output_paths, standard_streams  # noqa: E402
from hostile_files import log_fields, profiles, validation_csvs  # noqa: E402

SURFACES: dict[str, Callable[[random.Random, Path], Case]] = {
    "ci": ci_suites, "trials": trial_logs, "profiles": profiles, "csv": validation_csvs, "logfields": log_fields,
    "env": environment, "streams": standard_streams, "outpaths": output_paths, "llm": llm_endpoint,
}

__all__ = ["SURFACES", "ci_suites", "trial_logs"]
