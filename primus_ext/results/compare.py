"""``primus-ext compare A B --json OUT``: both projections and the rows of the comparison, as one schema document.

    from primus_ext.results.compare import comparison_document
    doc = comparison_document(a, b, labels=("70B", "70B PP4"), recipes=(recipe_a, recipe_b), overrides=((), ("...",)))
    doc["a"]["tokens_per_s_per_gpu"], doc["rows"][4]["change"]

Each side (``a``, ``b``) carries the ``projection`` document's fields under the same names and units (less its
header), its ``label`` and ``overrides``; ``rows`` are the table's figures: ``name``, ``a``, ``b``, ``unit`` and the
``change`` from A to B as printed (``+12.3 % better``, ``=``, ``differs``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from primus_ext.results import document
from primus_ext.results.projection import projection_fields, recipe_fields


def comparison_document(a: Any, b: Any, *, labels: tuple[str, str], recipes: tuple[Any, Any] = (None, None),
                        overrides: tuple[Sequence[str], Sequence[str]] = ((), ())) -> dict[str, Any]:
    """The ``comparison`` document of projections ``a`` and ``b``."""
    from primus_ext.report.compare import change, compare_rows

    sides = {name: {"label": label, "overrides": list(over), **projection_fields(p), **recipe_fields(recipe)}
             for name, label, p, recipe, over in zip(("a", "b"), labels, (a, b), recipes, overrides, strict=True)}
    rows = [{"name": r.name, "a": r.a, "b": r.b, "unit": r.unit, "change": change(r)} for r in compare_rows(a, b)]
    return document("comparison", **sides, rows=rows)
