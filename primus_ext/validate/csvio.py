"""Read a validation CSV with a required column layout (every failure a clean ``RecipeError``)."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

from primus_ext.errors import Problem, RecipeError

MAX_CSV_BYTES = 64 << 20
"""The published-runs CSVs are ~100 kB; a larger file is refused unread."""


def read_rows(path: str | Path, required: Sequence[str], layout: str) -> list[dict[str, str]]:
    """All data rows of ``path``; ``layout`` names the file whose columns are expected."""
    import io

    from primus_ext.files import InputRefused, open_input

    path = Path(path)
    try:  # a regular file only, bounded (files.open_input)
        with io.TextIOWrapper(open_input(path, max_bytes=MAX_CSV_BYTES, what="CSV"), encoding="utf-8",
                              newline="") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in required if c not in (reader.fieldnames or [])]
            if missing:
                raise RecipeError(problems=[Problem(path=str(path), message=f"missing columns {missing}",
                                                    fix=f"use the layout of shared/validation/{layout}")])
            return list(reader)
    except InputRefused as err:
        raise RecipeError(problems=[Problem(path=str(path), message=str(err))]) from None
    except OSError as err:
        raise RecipeError(problems=[Problem(path=str(path), message=f"cannot read: {err.strerror}")]) from None
