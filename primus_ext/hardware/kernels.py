"""Kernel efficiencies measured on a GPU, pinned into its family's profiles as ``efficiency.measured``.

A kernel sweep (``python benchmarks/gpu_kernel_sweep.py --out sweep.json`` on the GPU) times the kernels the
roofline prices. This module reads from it the values a profile states as fractions of its datasheet peaks
and writes them into every profile of the GPU's family:

    >>> sweep = read_sweep(Path("sweep.json"))                      # the device and its timed kernels
    >>> found = sweep_efficiencies(sweep, load_gpu("b200"))         # (KernelEfficiency("attention", ...),)
    >>> pin_measured(found, device=sweep["device"], source="sweep.json", family="blackwell",
    ...              folder=Path("profiles"))                  # b200.yaml, gb200.yaml, ...

Every profile of the family gets the fraction measured on the sweep's GPU, unchanged: a family shares one block
of efficiency fractions (its fit is one block, ``validate.stated.check_measured``), so a B200's attention fraction
is stated for the GB200 too (there, of the GB200's own peak), and an H200's HBM copy fraction for the H100's
HBM3 too; the comment names the GPU that measured it. ``primus-ext validate --fit --write-profiles`` then keeps
the values and fits the other fractions of a family with validation rows around them (a family on the pooled
prior keeps the prior's other values). CLI: ``primus-ext profile pin``.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from primus_ext.errors import Problem, RecipeError
from primus_ext.hardware import (
    _find,
    canonical_name,
    family_profiles,
    load_gpu,
    profile_source,
    profile_text,
    write_profiles,
)
from primus_ext.specs.system import Efficiency, GPUSpec

PINNABLE = ("attention", "hbm")
"""Efficiencies a sweep measures: ``attention`` (fused causal attention, forward + backward, 128-wide heads, as
many key-value heads as query heads, in the roofline's FLOP convention: the sweep counts them with
``roofline.ATTENTION_BWD_FACTOR``) over the BF16 dense peak; ``hbm`` (a device-to-device copy, bytes read +
written) over the datasheet HBM bandwidth."""
ATTENTION_TOKENS = 4096
"""Sequence length the attention value is read at by default: the most common per-rank sequence of the
validation rows (25 of the 49 Hopper rows train at 4096 tokens, 19 at 8192; shared/validation). The kernel's
efficiency grows with length (H200 cuDNN: 0.33 / 0.43 / 0.50 / 0.56 at 2k / 4k / 8k / 16k, RESULTS.md)."""
ATTENTION_BACKEND = "cudnn"
"""SDPA backend read by default: cuDNN's fused attention, the kernel family transformer-engine's fused attention
calls on NVIDIA GPUs (the other backends of the sweep: ``flash``, ``efficient``, ``default``)."""


@dataclass(frozen=True, kw_only=True)
class KernelRate:
    """What one kernel of the sweep reached."""

    name: str
    """The ``Efficiency`` field it measures."""
    rate: float
    """TFLOP/s (attention) or TB/s (hbm)."""
    what: str
    """The kernel and shape."""


@dataclass(frozen=True, kw_only=True)
class KernelEfficiency:
    """One efficiency a sweep measured, as a fraction of the measuring GPU's datasheet peak."""

    name: str
    """The ``Efficiency`` field it sets."""
    value: float
    """Fraction of the profile's datasheet peak, rounded to 4 digits as the profile states it."""
    measured: float
    """What the kernel reached: TFLOP/s (attention) or TB/s (hbm)."""
    peak: float
    """The datasheet peak it is a fraction of, same unit."""
    what: str
    """The kernel, its shape, its rate and the peak, for the profile's comment."""


def _problem(path: str, message: str, fix: str = "", value: Any = None) -> Problem:
    return Problem(path=path, message=message, fix=fix, value=value)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


MAX_SWEEP_BYTES = 64 << 20
"""A kernel sweep's JSON is ~100 kB; a larger file is refused unread."""
_SWEEP_FIX = "pass the JSON `benchmarks/gpu_kernel_sweep.py --out` wrote"


def read_sweep(path: Path) -> dict[str, Any]:
    """The JSON a kernel sweep wrote (its ``device`` and timed rows); a clear error when it is not one."""
    from primus_ext.files import InputRefused, load_json, read_input

    try:  # a regular file, bounded (a sweep is ~100 kB), nesting bounded
        data = load_json(read_input(path, max_bytes=MAX_SWEEP_BYTES, what="kernel sweep").decode("utf-8"))
    except InputRefused as err:
        raise RecipeError(problems=[_problem(str(path), str(err), _SWEEP_FIX)], source="kernel sweep",
                          what="invalid") from None
    except OSError as err:
        problem = _problem(str(path), f"cannot read the sweep ({err.strerror or err})", _SWEEP_FIX)
        raise RecipeError(problems=[problem], source="kernel sweep", what="invalid") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise RecipeError(problems=[_problem(str(path), f"not JSON ({err})", _SWEEP_FIX)], source="kernel sweep",
                          what="invalid") from None
    if not isinstance(data, dict) or not isinstance(data.get("device"), str):
        problem = _problem(f"{path}:device", "not a kernel sweep: no device name", _SWEEP_FIX)
        raise RecipeError(problems=[problem], source="kernel sweep", what="invalid")
    if data["device"] == "cpu":
        problem = _problem(f"{path}:device", "the sweep ran on the CPU (a --small dry run): it measured no GPU",
                           "run `python benchmarks/gpu_kernel_sweep.py --out sweep.json` on the GPU", "cpu")
        raise RecipeError(problems=[problem], source="kernel sweep", what="invalid")
    return data


def _attention(sweep: dict[str, Any], tokens: int, backend: str) -> KernelRate | Problem:
    rows = [r for r in sweep.get("attention") or [] if isinstance(r, dict)]
    mha = [r for r in rows if r.get("dim") == 128 and r.get("pass") == "fwd+bwd" and r.get("heads") == r.get("kv_heads")
           and _number(r.get("tflops")) and r["tflops"] > 0]
    picked = [r for r in mha if r.get("backend") == backend and r.get("seq") == tokens]
    if not picked:
        have = sorted({(str(r.get("backend")), str(r.get("seq"))) for r in mha})
        return _problem("attention", f"no {backend} fwd+bwd row with 128-wide heads at {tokens} tokens",
                        "pick one the sweep has with --attention-backend / --attention-tokens: "
                        + (", ".join(f"{b} at {s}" for b, s in have) or "none (the sweep has no attention rows)"))
    tflops = statistics.median(r["tflops"] for r in picked)
    return KernelRate(name="attention", rate=tflops,
                      what=f"{backend} causal attention fwd+bwd, 128-wide heads, {tokens} tokens")


def _hbm(sweep: dict[str, Any]) -> KernelRate | Problem:
    copy = sweep.get("hbm") or sweep.get("copy")  # gpu_kernel_sweep.py's key; gpu_hopper_check.py's
    rate = copy.get("tbps_read_plus_write") if isinstance(copy, dict) else None
    if not _number(rate) or rate <= 0:
        return _problem("hbm", "the sweep has no HBM copy", "rerun the sweep (its hbm group), or pin attention only")
    return KernelRate(name="hbm", rate=float(rate), what="device copy, read + write")


def sweep_rates(sweep: dict[str, Any], names: tuple[str, ...] = ("attention",), *,
                attention_tokens: int = ATTENTION_TOKENS, attention_backend: str = ATTENTION_BACKEND) -> tuple[
                    tuple[KernelRate, ...], list[Problem]]:
    """What the sweep measured for ``names`` (whatever GPU it ran on), and a problem for each it lacks."""
    rates, problems = [], []
    for name in dict.fromkeys(names):
        if name == "attention":
            got = _attention(sweep, attention_tokens, attention_backend)
        elif name == "hbm":
            got = _hbm(sweep)
        else:
            got = _problem(name, "not an efficiency a sweep measures", f"use {' or '.join(PINNABLE)}", name)
        (problems if isinstance(got, Problem) else rates).append(got)
    return tuple(rates), problems


def as_fractions(rates: tuple[KernelRate, ...], gpu: GPUSpec) -> tuple[KernelEfficiency, ...]:
    """``rates`` as fractions of ``gpu``'s datasheet peaks (BF16 dense for attention, HBM for hbm); a value
    outside (0, 1] (a sweep of another GPU) is refused."""
    found, problems = [], []
    for r in rates:
        peak, unit = ((gpu.bf16_dense_tflops, "TFLOP/s") if r.name == "attention"
                      else (gpu.hbm_bandwidth_bytes_per_s / 1e12, "TB/s"))
        eff = KernelEfficiency(name=r.name, value=round(r.rate / peak, 4), measured=r.rate, peak=peak,
                               what=f"{r.what}: {r.rate:.4g} {unit} of {gpu.name}'s {peak:.4g}")
        if not 0.0 < eff.value <= 1.0:
            problems.append(_problem(r.name, f"{eff.what}: not a fraction in (0, 1] of the profile's peak",
                                     "check that the sweep ran on this profile's GPU", eff.value))
        found.append(eff)
    if problems:
        raise RecipeError(problems=problems, source="kernel sweep", what="invalid")
    return tuple(found)


def sweep_efficiencies(sweep: dict[str, Any], gpu: GPUSpec, names: tuple[str, ...] = ("attention",), *,
                       attention_tokens: int = ATTENTION_TOKENS,
                       attention_backend: str = ATTENTION_BACKEND) -> tuple[KernelEfficiency, ...]:
    """The efficiencies ``names`` as fractions of ``gpu``'s datasheet peaks; every one the sweep lacks is
    listed in one error."""
    rates, problems = sweep_rates(sweep, names, attention_tokens=attention_tokens,
                                  attention_backend=attention_backend)
    if problems:
        raise RecipeError(problems=problems, source="kernel sweep", what="invalid")
    return as_fractions(rates, gpu)


def _stated_order(name: str) -> list[str]:
    """The efficiency keys profile ``name`` states, in its order (a rewrite keeps the diff to what changed)."""
    data = yaml.safe_load(profile_source(_find(canonical_name(name)))) or {}
    block = data.get("efficiency") or {}
    return [k for k in block if k not in ("calibration", "measured")]


PIN_NOTE = "# pinned efficiency.{name}:"
"""Start of the comment line a pin writes above a profile's efficiency block: the value's source, kept by later
refits (they rewrite the block only) and replaced by the next pin of the same parameter."""
_MEASURED_NOTE = re.compile(r"; (?P<name>\w+) \S+ as measured \([^)]*\)")
"""A calibration's remark on a measured value (the fit's, ``with_measured``'s or a pin's)."""


def pinned(efficiency: Efficiency, found: tuple[KernelEfficiency, ...]) -> Efficiency:
    """``efficiency`` with ``found`` stated as measured; its calibration remarks on each (an earlier remark on the
    same parameter replaced): a changed value was pinned after the others were fitted beside the old one, until
    ``validate --fit`` refits them (which keeps the measured values)."""
    names = {e.name for e in found}
    moved = {e.name for e in found if e.name not in efficiency.measured or getattr(efficiency, e.name) != e.value}
    calibration = _MEASURED_NOTE.sub(lambda m: "" if m["name"] in moved else m[0], efficiency.calibration)
    for e in found:
        if e.name in moved:  # the same value again keeps its remark where the fit wrote it
            after_fit = not calibration.startswith("uncalibrated")
            calibration += (f"; {e.name} {e.value:.4g} as measured "
                            f"({'pinned after the values above were fitted' if after_fit else 'not fitted'})")
    return replace(efficiency, **{e.name: e.value for e in found},
                   measured=(*[m for m in efficiency.measured if m not in names], *[e.name for e in found]),
                   calibration=calibration)


def _one_line(text: str) -> str:
    """``text`` without control characters: a device name or path cannot break out of its comment line."""
    return re.sub(r"[\x00-\x1f\x7f]+", " ", text).strip()


def pin_note(eff: KernelEfficiency, device: str, source: str) -> str:
    """The comment line citing where ``eff`` was measured."""
    return _one_line(f"{PIN_NOTE.format(name=eff.name)} {eff.value:.4g} measured on {device}, {eff.what} ({source})")


def pin_measured(found: tuple[KernelEfficiency, ...], *, device: str, source: str, family: str,
                 folder: Path) -> list[Path]:
    """Write every profile of ``family`` into ``folder`` with ``found`` pinned as measured and a comment citing
    ``device`` and ``source`` (the sweep file) beside each; the paths written. All or none is written
    (``hardware.write_profiles``): a family's profiles must agree on their measured values."""
    notes = {PIN_NOTE.format(name=e.name): pin_note(e, device, source) for e in found}
    texts = {}
    for name in family_profiles(family):
        stated = _stated_order(name)
        fields = [*stated, *(e.name for e in found if e.name not in stated), "measured"]
        texts[name] = profile_text(name, pinned(load_gpu(name).efficiency, found), fields, notes=notes)
    return write_profiles(texts, folder)


__all__ = ["ATTENTION_BACKEND", "ATTENTION_TOKENS", "PINNABLE", "PIN_NOTE", "KernelEfficiency", "KernelRate",
           "as_fractions", "pin_measured", "pin_note", "pinned", "read_sweep", "sweep_efficiencies", "sweep_rates"]
