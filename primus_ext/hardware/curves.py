"""Kernel curves per GPU family: ``kernel_curves.yaml`` -> ``KernelCurves``.

    >>> curves_for("blackwell").attention_fwd.efficiencies     # (0.4511, 0.7028): head dims 64, 128
    >>> curves_for("ampere")                                    # None: no public kernel data for that family

The file is written by ``benchmarks/fit_kernel_curves.py`` from public kernel measurements (cuDNN-frontend's SDPA
benchmark, AITER, Primus-Turbo, HipKittens' Composable Kernel baselines: each curve names its sources), never by
hand. ``gpu_from_mapping`` attaches a profile's family curves to its ``GPUSpec``; the roofline prices attention on
them (``model.roofline``). A family without a curve keeps the roofline's head-dim law.
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from primus_ext.errors import Problem, RecipeError
from primus_ext.files import note_input
from primus_ext.specs.system import AttentionCurve, GroupedCurve, KernelCurves

CURVES_FILE = Path(__file__).with_name("kernel_curves.yaml")


def _attention(data: Any, where: str) -> tuple[AttentionCurve | None, list[Problem]]:
    if data is None:
        return None, []
    try:
        by_dim = sorted((int(d), float(e)) for d, e in data["efficiency_by_head_dim"].items())
        curve = AttentionCurve(head_dims=tuple(d for d, _ in by_dim), efficiencies=tuple(e for _, e in by_dim),
                               row_keys=float(data["row_keys"]), latency_s=float(data["latency_s"]))
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        return None, [Problem(path=where, message=f"not a kernel curve ({type(err).__name__}: {err})",
                              fix="regenerate it with benchmarks/fit_kernel_curves.py")]
    numbers = (*curve.efficiencies, curve.row_keys, curve.latency_s)
    if not curve.head_dims or not all(math.isfinite(v) and v >= 0 for v in numbers) \
            or not all(0 < e <= 1 for e in curve.efficiencies) or min(curve.head_dims) <= 0:
        return None, [Problem(path=where, value=numbers, message="a kernel curve needs head dims > 0, efficiencies "
                              "in (0, 1] and finite non-negative row keys and latency",
                              fix="regenerate it with benchmarks/fit_kernel_curves.py")]
    return curve, []


def _grouped(data: Any, where: str) -> tuple[GroupedCurve | None, list[Problem]]:
    try:
        curve = GroupedCurve(efficiency=float(data["efficiency"]), m_half=float(data["m_half"]),
                             latency_s=float(data["latency_s"]))
    except (KeyError, TypeError, ValueError) as err:
        return None, [Problem(path=where, message=f"not a grouped-GEMM curve ({type(err).__name__}: {err})",
                              fix="regenerate it with benchmarks/fit_kernel_curves.py")]
    if not (0 < curve.efficiency <= 1 and math.isfinite(curve.m_half) and curve.m_half >= 0
            and math.isfinite(curve.latency_s) and curve.latency_s >= 0):
        return None, [Problem(path=where, value=(curve.efficiency, curve.m_half, curve.latency_s),
                              message="a grouped-GEMM curve needs an efficiency in (0, 1] and finite non-negative "
                                      "m_half and latency", fix="regenerate it with benchmarks/fit_kernel_curves.py")]
    return curve, []


@cache
def _all_curves(path: Path = CURVES_FILE) -> dict[str, KernelCurves]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as err:
        raise RecipeError(problems=[Problem(path=str(path), message=f"kernel curves unreadable: {err}",
                                            fix="reinstall primus-ext")]) from None
    attention = data.get("attention") if isinstance(data, dict) else None
    if not isinstance(attention, dict):
        raise RecipeError(problems=[Problem(path=f"{path}:attention", message="no attention curves",
                                            fix="regenerate it with benchmarks/fit_kernel_curves.py")])
    grouped_data = data.get("grouped_gemm") or {}
    out, problems = {}, []
    grouped: dict[str, list[tuple[str, GroupedCurve]]] = {}
    for family, curves in (grouped_data.items() if isinstance(grouped_data, dict) else ()):
        for key, value in (curves.items() if isinstance(curves, dict) else ()):
            curve, found = _grouped(value, f"{path}:grouped_gemm.{family}.{key}")
            problems += found
            if curve is not None:
                grouped.setdefault(str(family), []).append((str(key), curve))
    for family, directions in attention.items():
        if not isinstance(directions, dict):
            problems.append(Problem(path=f"{path}:attention.{family}", message="not a mapping of fwd / bwd curves"))
            continue
        fwd, p_fwd = _attention(directions.get("fwd"), f"{path}:attention.{family}.fwd")
        bwd, p_bwd = _attention(directions.get("bwd"), f"{path}:attention.{family}.bwd")
        problems += p_fwd + p_bwd
        sources = sorted({s for d in directions.values() if isinstance(d, dict) for s in d.get("sources") or ()})
        out[str(family)] = KernelCurves(family=str(family), attention_fwd=fwd, attention_bwd=bwd,
                                        grouped=tuple(sorted(grouped.pop(str(family), []))),
                                        sources=", ".join(sources))
    for family, pairs in grouped.items():  # a family with grouped-GEMM data and no attention data
        out[family] = KernelCurves(family=family, grouped=tuple(sorted(pairs)))
    if problems:
        raise RecipeError(problems=problems, source=str(path), what="invalid kernel curves")
    return out


def curves_for(family: str) -> KernelCurves | None:
    """The kernel curves of GPU family ``family``, or ``None`` where no public kernel data was fitted (the file is an
    input of the command: no output may replace it)."""
    note_input(CURVES_FILE)
    return _all_curves().get(family) if family else None


__all__ = ["CURVES_FILE", "curves_for"]
