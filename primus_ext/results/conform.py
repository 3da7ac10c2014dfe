"""Numbers a document carries stay inside the schema's bounds: rounded, then clamped where only float noise
crosses a bound.

    from primus_ext.results.conform import conform
    doc = conform(projection_document(p))     # emit_json does this for every document it writes

A ratio computed as ``exposed / total`` can come out as ``1.0000000000000002``; the schema says a fraction is at
most 1, so a script validating the document would refuse a correct result. Every float is rounded to
``SIGNIFICANT`` digits, then a value beyond a ``minimum`` / ``maximum`` by no more than ``TOLERANCE`` (relative)
is set to the bound. A value further out is left as it is: that is a bug the schema test must see, not noise to
hide.
"""

from __future__ import annotations

import math
from typing import Any

from primus_ext.results.schema import SCHEMA

SIGNIFICANT = 12
"""Digits kept of a float: a double carries ~15.9, the last three are where summation noise lives."""
TOLERANCE = 1e-9
"""Relative excess over a bound still read as rounding noise (far above a double's 2.2e-16 epsilon, far below
any figure the documents print)."""


def _resolve(schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref:
        return _resolve(SCHEMA["$defs"][ref.rsplit("/", 1)[-1]])
    return schema


def _round(value: float) -> float:
    if not math.isfinite(value) or value == 0:
        return value
    return round(value, SIGNIFICANT - 1 - math.floor(math.log10(abs(value))))


def _bounded(value: float, schema: dict[str, Any]) -> float:
    value = _round(value)
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and value < low and low - value <= TOLERANCE * max(1.0, abs(low)):
        return float(low)
    if high is not None and value > high and value - high <= TOLERANCE * max(1.0, abs(high)):
        return float(high)
    return value


def _branches(value: Any, schema: dict[str, Any]) -> list[dict[str, Any]]:
    """The sub-schemas that apply to ``value``: ``anyOf``'s first branch of the right type, ``allOf``'s
    ``if``/``then`` whose ``kind`` matches."""
    out = [schema]
    for branch in schema.get("anyOf", ()):
        branch = _resolve(branch)
        if branch.get("type") != "null" or value is None:
            out += _branches(value, branch)
            break
    for part in schema.get("allOf", ()):
        cond = part.get("if", {}).get("properties", {}).get("kind", {}).get("const")
        if cond is not None and isinstance(value, dict) and value.get("kind") == cond:
            out += _branches(value, _resolve(part["then"]))
    return out


def _walk(value: Any, schema: dict[str, Any]) -> Any:
    schemas = _branches(value, _resolve(schema))
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float):
        for s in schemas:
            if "minimum" in s or "maximum" in s:
                return _bounded(value, s)
        return _round(value)
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            sub = next((s["properties"][key] for s in schemas if key in s.get("properties", {})), None)
            if sub is None:
                sub = next((s["additionalProperties"] for s in schemas
                            if isinstance(s.get("additionalProperties"), dict)), {})
            out[key] = _walk(item, sub)
        return out
    if isinstance(value, (list, tuple)):
        items = next((s["items"] for s in schemas if isinstance(s.get("items"), dict)), {})
        return [_walk(item, items) for item in value]
    return value


def conform(doc: Any) -> Any:
    """``doc`` with every float rounded and float noise over a schema bound clamped (a new object)."""
    return _walk(doc, SCHEMA)


__all__ = ["SIGNIFICANT", "TOLERANCE", "conform"]
