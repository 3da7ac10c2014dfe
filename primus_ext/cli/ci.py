"""``primus-ext ci``: performance CI over a suite of recipes x clusters, against a baseline.

    primus-ext ci ci/suite.yaml --baseline ci/baseline.json --junit perf.xml --markdown perf.md
    primus-ext ci ci/suite.yaml --baseline ci/baseline.json --update-baseline   # after a reviewed change

Exit codes: 0 all within tolerance (improvements reported), 1 a regression or projection drift,
2 a malformed suite, a missing/invalid baseline or an entry that cannot be projected. ``--json OUT`` and the
baseline file are the result schema's ``ci`` and ``baseline`` documents (``primus_ext.results``); ``--json -``
writes the JSON alone to stdout (the markdown summary goes to stderr).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ci", help="performance CI: projected throughput/memory vs a baseline",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("suite", help="suite YAML (recipes x clusters x nodes with tolerances)")
    p.add_argument("--baseline", help="baseline JSON (default: baseline.json beside the suite)")
    p.add_argument("--update-baseline", action="store_true", help="write the current projections as baseline")
    p.add_argument("--junit", help="write JUnit XML here")
    p.add_argument("--markdown", help="write a markdown summary here (e.g. $GITHUB_STEP_SUMMARY)")
    p.add_argument("--json", dest="json_out", metavar="OUT",
                   help="write results as JSON here ('-': stdout, the JSON only; the summary goes to stderr)")
    p.set_defaults(func=run)


MAX_BASELINE_BYTES = 64 << 20
"""A baseline holds a few hundred bytes per suite entry."""


def _load_baseline(path: Path):
    from primus_ext.errors import Problem, RecipeError, capped, cut
    from primus_ext.files import InputRefused, load_json, read_input

    try:
        data = load_json(read_input(path, max_bytes=MAX_BASELINE_BYTES, what="baseline").decode("utf-8"))
    except InputRefused as err:
        raise RecipeError(problems=[Problem(path=str(path), message=str(err))]) from None
    except FileNotFoundError:
        raise RecipeError(problems=[Problem(path=str(path), message="baseline file not found",
                                            fix="create it with --update-baseline")]) from None
    except UnicodeDecodeError as err:
        raise RecipeError(problems=[Problem(path=str(path), message=f"not UTF-8 text ({err.reason})",
                                            fix="give the file --update-baseline wrote")]) from None
    except (OSError, ValueError) as err:  # not JSON, nested too deep, an integer of over 4 300 digits
        raise RecipeError(problems=[Problem(path=str(path), message=f"unreadable baseline: {err}",
                                            fix="give the file --update-baseline wrote")]) from None
    if isinstance(data, dict) and data.get("kind", "baseline") != "baseline":
        raise RecipeError(problems=[Problem(path=f"{path}:kind", value=data.get("kind"),
                                            message="not a baseline file (a ci result?)",
                                            fix="give the file --update-baseline wrote")])
    # schema_version 1 (kind "baseline") and the older {"version": 1} files name the entries' figures alike
    entries = data.get("entries") if isinstance(data, dict) else None
    if not isinstance(entries, dict) or not all(isinstance(v, dict) for v in entries.values()):
        raise RecipeError(problems=[Problem(path=f"{path}:entries", message="expected a mapping name -> numbers",
                                            fix="regenerate it with --update-baseline")])
    problems = [Problem(path=f"{path}:entries.{cut(name)}.{key}", value=value,
                        message="must be a finite non-negative number or null", fix="regenerate it with "
                        "--update-baseline")
                for name, figures in entries.items() for key, value in figures.items()
                if key in FIGURES and value is not None and (isinstance(value, bool) or not isinstance(
                    value, int | float) or not 0 <= value < float("inf"))]
    if problems:
        raise RecipeError(problems=capped(problems), source=str(path), what="invalid baseline")
    return entries


FIGURES = ("step_time_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu", "peak_memory_gib")
"""The figures of a baseline entry (the result schema's ``baseline_entry``) the comparison reads."""


def run(args: argparse.Namespace) -> int:
    from primus_ext.files import check_outputs, stream_of, write_output
    from primus_ext.perfci import load_suite, run_suite
    from primus_ext.perfci.outputs import baseline_dict, junit_xml, markdown, to_json, write_json
    from primus_ext.results import check_json_out, emit_json, tables_to_stderr

    check_json_out(args.json_out)
    check_outputs(("--junit", args.junit), ("--markdown", args.markdown), ("--json", args.json_out),  # before any work
                  inputs=(args.suite, None if args.update_baseline else args.baseline))
    suite = load_suite(args.suite)
    baseline_path = Path(args.baseline) if args.baseline else suite.path.parent / "baseline.json"
    if args.update_baseline:  # an output then, checked (and planned) with the others, before the entries run
        check_outputs(("--baseline", baseline_path))
    baseline = None if args.update_baseline else _load_baseline(baseline_path)
    result = run_suite(suite, baseline, progress=lambda m: print(m, file=sys.stderr, flush=True))
    text = markdown(result)
    with tables_to_stderr(args.json_out):
        print(text)
    for e in result.entries:  # on stderr, with --json - too
        for note in e.notes:
            print(f"note: {e.name}: {note}", file=sys.stderr)
    if args.junit:
        write_output(args.junit, junit_xml(result), label="--junit")
    if args.markdown:
        write_output(args.markdown, text, label="--markdown")
    if stream_of(args.json_out) is not None:
        emit_json(to_json(result), args.json_out)
    elif args.json_out:
        write_json(args.json_out, to_json(result), label="--json")
    if args.update_baseline:
        if result.count("error"):
            print("not writing the baseline: some entries could not be projected", file=sys.stderr)
            return 2
        write_json(baseline_path, baseline_dict(result), label="--baseline")
        print(f"baseline written: {baseline_path}", file=sys.stderr)
        return 0
    for e in result.entries:
        if e.status in ("regression", "drift", "error"):
            print(f"{e.status.upper()}: {e.name}: {e.message}", file=sys.stderr)
    return result.exit_code
