"""Read a validation CSV with a required column layout (every failure a clean ``RecipeError``, all listed at once).

    rows = read_rows("measured_throughput.csv", REQUIRED_RUN_COLUMNS, "measured_throughput.csv")
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from pathlib import Path

from primus_ext.errors import Problem, RecipeError, capped

MAX_CSV_BYTES = 64 << 20
"""The published-runs CSVs are ~100 kB; a larger file is refused unread."""
MAX_COLUMNS = 256
"""Columns of a validation CSV (the published ones have 13 to 22); a wider table is refused before a row is read."""
MAX_ROWS = 20_000
"""Data rows (the published runs are 184; ``--fit`` costs ~0.1 CPU-s a row): more are refused before any work."""


def read_rows(path: str | Path, required: Sequence[str], layout: str) -> list[dict[str, str]]:
    """All data rows of ``path`` (blank lines skipped); ``layout`` names the file whose columns are expected. Refused
    with every problem at once: a missing, repeated or blank-named column, more than ``MAX_COLUMNS`` columns or
    ``MAX_ROWS`` rows, a row with more or fewer fields than the header, text that is not UTF-8 CSV."""
    from primus_ext.files import InputRefused, read_input

    path = Path(path)
    fix = f"use the layout of shared/validation/{layout}"
    try:  # a regular file only, bounded (files.read_input)
        text = read_input(path, max_bytes=MAX_CSV_BYTES, what="CSV").decode("utf-8")
        table = csv.reader(io.StringIO(text, newline=""))
        header = next(table, [])
        problems = _header_problems(path, header, required, fix)
        if problems:  # a header this wrong says nothing of the rows
            raise RecipeError(problems=problems, source=str(path), what="invalid CSV")
        rows, problems = [], []
        for record in table:
            if not any(field.strip() for field in record):
                continue
            if len(rows) == MAX_ROWS:
                raise RecipeError(problems=[Problem(path=str(path), message=f"more than {MAX_ROWS:,} rows",
                                                    fix="split the table")], source=str(path), what="invalid CSV")
            if len(record) != len(header):
                problems.append(Problem(path=f"{path}:line {table.line_num}", message=f"{len(record)} fields, the "
                                        f"header has {len(header)}", fix="quote a field holding a comma (\"a,b\"), or "
                                        "add the missing fields (empty ones: ,,)"))
            rows.append(dict(zip(header, record, strict=False)))
    except InputRefused as err:
        raise RecipeError(problems=[Problem(path=str(path), message=str(err))]) from None
    except OSError as err:
        raise RecipeError(problems=[Problem(path=str(path), message=f"cannot read: {err.strerror}")]) from None
    except UnicodeDecodeError as err:
        raise RecipeError(problems=[Problem(path=str(path), message=f"not UTF-8 text ({err.reason} at byte "
                                            f"{err.start})", fix="save the table as UTF-8 CSV")]) from None
    except csv.Error as err:  # a field past csv.field_size_limit (128 KiB), a NUL byte
        raise RecipeError(problems=[Problem(path=str(path), message=f"not a CSV table: {err}", fix=fix)]) from None
    if problems:
        raise RecipeError(problems=capped(problems), source=str(path), what="invalid CSV")
    return rows


def _header_problems(path: Path, header: list[str], required: Sequence[str], fix: str) -> list[Problem]:
    if len(header) > MAX_COLUMNS:
        return [Problem(path=str(path), message=f"{len(header):,} columns, more than the {MAX_COLUMNS} read", fix=fix)]
    problems = []
    missing = [c for c in required if c not in header]
    if missing:
        problems.append(Problem(path=str(path), message=f"missing columns {missing}", fix=fix))
    seen: set[str] = set()
    for column, name in enumerate(header, 1):
        if name in seen:
            problems.append(Problem(path=f"{path}:column {column}", value=name, message="a column of this name "
                                    "comes earlier: which one holds the figures is unclear",
                                    fix="rename or remove one"))
        seen.add(name)
    return problems


MAX_DIGITS = 15
"""The longest count a cell may state (a GPU count, a batch, a parallel size): Python's ``int()`` refuses more than
4 300 digits, and no run counts past 10^15 (issue 56)."""
COUNT_COLUMNS = ("num_gpus", "tp", "pp", "vpp", "cp", "ep", "etp", "dp", "mbs", "gbs", "seq_len")
"""The runs CSV's columns that hold counts."""
_COUNT = re.compile(r"\s*(\d+)")


def leading_count(text: str | None, default: int | None = None) -> int | None:
    """The count a cell starts with (``"8"``, ``"8 (2 x 4)"``), else ``default`` (also past ``MAX_DIGITS``)."""
    match = _COUNT.match(text or "")
    return int(match.group(1)) if match and len(match.group(1)) <= MAX_DIGITS else default


def overlong_counts(row: dict[str, str]) -> list[str]:
    """The count columns of ``row`` whose number runs past ``MAX_DIGITS`` digits (the row is skipped, named)."""
    return [c for c in COUNT_COLUMNS if (m := _COUNT.match(row.get(c) or "")) and len(m.group(1)) > MAX_DIGITS]
