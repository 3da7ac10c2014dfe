"""Host time per layer pass: ``host_time.yaml`` -> ``HostTime`` per layer kind.

    >>> host_time_of("moe")          # HostTime(fwd_s=0.0039, bwd_s=0.0047, fwd_ops=126, bwd_ops=194)
    >>> measured_on()                # "cpu:AMD EPYC (2026-12-07, torch=2.13.0+cpu;megatron-core=0.16.1;te=none)"

Written by ``benchmarks/measure_host_time.py`` from the real megatron-core modules run on a CPU (``measure.host``),
never by hand; ``model.roofline`` floors a layer pass at it where kernels are launched one by one. A kind not in the
file (Mamba, the hybrid kinds) has no floor: it is said so, not guessed.
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path

import yaml

from primus_ext.errors import Problem, RecipeError
from primus_ext.files import note_input
from primus_ext.specs.system import HostTime

HOST_FILE = Path(__file__).with_name("host_time.yaml")


@cache
def _load(path: Path = HOST_FILE) -> tuple[dict[str, HostTime], str]:
    def broken(message: str) -> RecipeError:
        return RecipeError(problems=[Problem(path=str(path), message=message,
                                             fix="regenerate it with benchmarks/measure_host_time.py")])
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as err:
        raise broken(f"host times unreadable: {err}") from None
    if not isinstance(data, dict) or not isinstance(data.get("kinds"), dict):
        raise broken("no `kinds:` mapping")
    out = {}
    for kind, entry in data["kinds"].items():
        try:
            host = HostTime(fwd_s=float(entry["fwd_s"]), bwd_s=float(entry["bwd_s"]),
                            fwd_ops=int(entry.get("fwd_ops", 0)), bwd_ops=int(entry.get("bwd_ops", 0)))
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise broken(f"kinds.{kind}: not a host time ({type(err).__name__}: {err})") from None
        if not all(math.isfinite(v) and v >= 0 for v in (host.fwd_s, host.bwd_s)):
            raise broken(f"kinds.{kind}: host seconds must be finite and >= 0")
        out[str(kind)] = host
    where = f"{data.get('measured_on', 'a CPU')} ({data.get('date', 'undated')}, {data.get('versions', '')})"
    return out, where


def host_time_of(kind: str) -> HostTime | None:
    """The measured host time of one pass of a ``kind`` layer, or ``None`` where it was not measured (the file is
    an input of the command: no output may replace it)."""
    note_input(HOST_FILE)
    return _load()[0].get(kind)


def measured_on() -> str:
    """Where and when the host times were measured."""
    note_input(HOST_FILE)
    return _load()[1]


__all__ = ["HOST_FILE", "host_time_of", "measured_on"]
