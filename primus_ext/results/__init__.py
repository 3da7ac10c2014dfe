"""One result schema for every command's JSON: ``project``, ``project --memory-only``, ``compare``, ``tune``, ``ci``
and its baseline file, ``train --verify``, ``calibrate`` and ``validate`` (incl. ``--calibrate-from``).

    primus-ext project recipes/llama3.1_8B-pretrain.yaml --json - | jq .tokens_per_s_per_gpu
    primus-ext tune recipes/llama3.1_8B-pretrain.yaml --json - | jq .best.tokens_per_s_per_gpu

    from primus_ext.results import SCHEMA_VERSION, emit_json
    from primus_ext.results.schema import SCHEMA        # JSON Schema (draft 2020-12) of every document

Every document carries ``schema_version`` and ``kind`` (``KINDS``). The same figure has the same name and
unit everywhere, the unit in the name: ``step_time_s``, ``tokens_per_s_per_gpu``, ``tflops_per_gpu``,
``peak_memory_gib``, ``capacity_gib``; a ratio is a fraction (``mfu``, ``gain``, ``margin``) unless its name
ends in ``_pct``. ``--json -`` writes the document, and nothing else, to stdout (``emit_json``).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

from primus_ext.errors import Problem, RecipeError
from primus_ext.results.version import KINDS, SCHEMA_VERSION

GIB = 1024**3


def gib(value: float | None) -> float | None:
    """Bytes -> GiB, to the MiB (what the documents say of memory)."""
    return None if value is None else round(float(value) / GIB, 3)


def document(kind: str, **fields: Any) -> dict[str, Any]:
    """A top-level document: ``schema_version``, ``kind``, then ``fields``."""
    assert kind in KINDS, kind
    return {"schema_version": SCHEMA_VERSION, "kind": kind, **fields}


def check_json_out(out: str | None, flag: str = "--json") -> None:
    """Refuse an output path that looks like a recipe (``--json recipe.yaml`` would overwrite it): exit 2."""
    from primus_ext.files import stream_of

    if out and stream_of(out) is None and out.lower().endswith((".yaml", ".yml")):
        raise RecipeError(problems=[Problem(
            path=flag, value=out,
            message=f"{flag} takes the file the JSON is written to, and {out} is a YAML path (a recipe?): "
                    "nothing was written",
            fix=f"write the recipe before the options and give {flag} an output: `{flag} -` for stdout or "
                f"`{flag} result.json`")])


def _plain(value: Any) -> Any:
    """What ``json`` cannot write itself: a numpy scalar as its number, anything else (a path) as text."""
    item = getattr(value, "item", None)
    return item() if callable(item) else str(value)


@contextlib.contextmanager
def tables_to_stderr(out: str | None) -> Iterator[None]:
    """With ``--json -`` (or ``/dev/stdout``) what a command prints for people goes to stderr, so stdout carries the
    JSON only."""
    from primus_ext.files import stream_of

    if stream_of(out) != 1:
        yield
        return
    with contextlib.redirect_stdout(sys.stderr):
        yield


def dumps(doc: Any) -> str:
    """``doc`` as the JSON text every result file carries: plain types, floats rounded and float noise over a
    schema bound clamped (``results.conform``), indented."""
    from primus_ext.results.conform import conform  # conform reads the schema, which imports this module

    return json.dumps(conform(json.loads(json.dumps(doc, default=_plain))), indent=2)


def emit_json(doc: Any, out: str | None, label: str = "--json") -> None:
    """Write ``doc`` as JSON to ``out``: ``-`` is stdout (the JSON only), else a file, atomically and never over an
    input (``files.write_output``; said on stderr). ``label``: the flag named if the path is refused."""
    if out is None:
        return
    from primus_ext.files import stream_of, write_output

    text = dumps(doc)
    if stream_of(out) is not None:  # -, /dev/stdout, /dev/stderr: the stream as it stands, never the file behind it
        print(text, file=sys.stdout if stream_of(out) == 1 else sys.stderr, flush=True)
        return
    write_output(out, text + "\n", label=label)
    print(f"wrote {out}", file=sys.stderr)
