"""Suite results as JUnit XML, a markdown job summary, JSON, and the baseline file.

The JSON and the baseline file are the result schema's ``ci`` and ``baseline`` documents
(``primus_ext.results``); a baseline written before it (``{"version": 1, ...}``, the same entry names) still reads.

JUnit XML follows the layout CI tools read (Jenkins / GitLab / GitHub test reporters, the
``junit-10.xsd`` structure): ``<testsuites>`` > ``<testsuite name tests failures errors skipped time>``
> ``<testcase classname name time>`` with a ``<failure message type>`` or ``<error message type>``
child. Regressions and drift are failures; entries that could not be projected are errors.
"""

from __future__ import annotations

import dataclasses
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from primus_ext.perfci.runner import SuiteResult
from primus_ext.results import document

MARKS = {"pass": "✅", "improved": "🟢", "regression": "❌", "drift": "⚠️", "error": "💥"}


def junit_xml(result: SuiteResult) -> str:
    failures = result.count("regression") + result.count("drift")
    total_time = sum(e.wall_s for e in result.entries)
    suites = ET.Element("testsuites", name="primus-ext perf ci", tests=str(len(result.entries)),
                        failures=str(failures), errors=str(result.count("error")), time=f"{total_time:.3f}")
    suite = ET.SubElement(suites, "testsuite", name=result.suite, tests=str(len(result.entries)),
                          failures=str(failures), errors=str(result.count("error")), skipped="0",
                          time=f"{total_time:.3f}")
    for e in result.entries:
        case = ET.SubElement(suite, "testcase", classname=f"perf.{result.suite}", name=e.name,
                             time=f"{e.wall_s:.3f}")
        if e.status in ("regression", "drift"):
            node = ET.SubElement(case, "failure", message=e.message, type=e.status)
            node.text = _detail(e)
        elif e.status == "error":
            node = ET.SubElement(case, "error", message=e.message, type="error")
            node.text = e.message
        else:
            out = ET.SubElement(case, "system-out")
            out.text = _detail(e)
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def _detail(e) -> str:
    parts = [f"status: {e.status}", f"tokens/s/GPU: {e.tokens_per_s_per_gpu}", f"peak memory GiB: {e.peak_memory_gib}",
             f"cost source: {e.cost_source}"]
    if e.baseline:
        parts.append(f"baseline tokens/s/GPU: {e.baseline.get('tokens_per_s_per_gpu')}, "
                     f"peak memory GiB: {e.baseline.get('peak_memory_gib')}")
    parts.append(e.message)
    return "\n".join(parts)


def _fmt(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def markdown(result: SuiteResult) -> str:
    lines = [f"### primus-ext perf CI: `{result.suite}`", "",
             f"{len(result.entries)} entries: {result.count('pass')} pass, {result.count('improved')} improved, "
             f"{result.count('regression')} regressed, {result.count('drift')} drifted, {result.count('error')} errors",
             "", "| | entry | tok/s/GPU before | after | Δ % | peak GiB before | after | Δ GiB | costs | note |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for e in result.entries:
        base = e.baseline or {}
        lines.append(
            f"| {MARKS.get(e.status, '')} | {e.name} | {_fmt(base.get('tokens_per_s_per_gpu'), ',.1f')} | "
            f"{_fmt(e.tokens_per_s_per_gpu, ',.1f')} | {_fmt(e.throughput_delta_pct, '+.2f')} | "
            f"{_fmt(base.get('peak_memory_gib'), '.2f')} | {_fmt(e.peak_memory_gib, '.2f')} | "
            f"{_fmt(e.memory_delta_gib, '+.2f')} | {e.cost_source or '–'} | {e.message.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def to_json(result: SuiteResult) -> dict[str, Any]:
    """The ``ci`` document: every entry's figures, verdict and deltas, the counts and the exit code."""
    return document("ci", suite=result.suite, exit_code=result.exit_code,
                    counts={s: result.count(s) for s in MARKS},
                    entries=[{**dataclasses.asdict(e), "baseline": None if e.baseline is None else dict(e.baseline)}
                             for e in result.entries])


def baseline_dict(result: SuiteResult) -> dict[str, Any]:
    """The ``baseline`` document (the file ``--update-baseline`` writes)."""
    return document("baseline", suite=result.suite,
                    entries={e.name: e.to_baseline() for e in result.entries if e.status != "error"})


def write_json(path: str | Path, data: Any, *, label: str | None = None) -> None:
    """``data`` as sorted, indented JSON, written atomically and never over an input (``files.write_output``;
    ``label``: the flag a refusal names)."""
    from primus_ext.files import write_output

    write_output(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n", label=label)
