"""Kernel efficiencies measured on a GPU, pinned into its family's profiles as ``efficiency.measured``.

A kernel sweep (``python benchmarks/gpu_kernel_sweep.py --out sweep.json`` on the GPU) times the kernels the
roofline prices. This module reads from it the values a profile states as fractions of its datasheet peaks
and writes them into every profile of the GPU's family:

    >>> sweep = read_sweep(Path("sweep.json"))                      # the device and its timed kernels
    >>> found = sweep_efficiencies(sweep, load_gpu("b200"))         # (KernelEfficiency("attention", ...),)
    >>> pin_measured(found, device=sweep["device"], source="sweep.json", family="blackwell",
    ...              folder=Path("profiles"))                  # b200.yaml, gb200.yaml, ...

The family's profiles all get the values: a family shares its calibrated fractions (its fit is one block,
``validate.stated.check_measured``), and each value is a fraction of its own profile's peak. ``primus-ext
validate --fit`` then keeps them and fits the other fractions around them. CLI: ``primus-ext profile pin``.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from primus_ext.errors import Problem, RecipeError
from primus_ext.hardware import _find, canonical_name, family_profiles, load_gpu, write_efficiency
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
class KernelEfficiency:
    """One efficiency a sweep measured."""

    name: str
    """The ``Efficiency`` field it sets."""
    value: float
    """Fraction of the profile's datasheet peak, rounded to 4 digits as the profile states it."""
    measured: float
    """What the kernel reached: TFLOP/s (attention) or TB/s (hbm)."""
    peak: float
    """The datasheet peak it is a fraction of, same unit."""
    what: str
    """The kernel and shape, for the profile's calibration note."""


def _problem(path: str, message: str, fix: str = "", value: Any = None) -> RecipeError:
    return RecipeError(problems=[Problem(path=path, message=message, fix=fix, value=value)], source="kernel sweep")


def read_sweep(path: Path) -> dict[str, Any]:
    """The JSON a kernel sweep wrote (its ``device`` and timed rows); a clear error when it is not one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise _problem(str(path), f"cannot read the sweep ({err.strerror or err})",
                       "pass the JSON `benchmarks/gpu_kernel_sweep.py --out` wrote") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise _problem(str(path), f"not JSON ({err})", "pass the JSON `benchmarks/gpu_kernel_sweep.py --out` wrote") \
            from None
    if not isinstance(data, dict) or not isinstance(data.get("device"), str):
        raise _problem(f"{path}:device", "not a kernel sweep: no device name",
                       "pass the JSON `benchmarks/gpu_kernel_sweep.py --out` wrote")
    if data["device"] == "cpu":
        raise _problem(f"{path}:device", "the sweep ran on the CPU (a --small dry run): it measured no GPU",
                       "run `python benchmarks/gpu_kernel_sweep.py --out sweep.json` on the GPU", "cpu")
    return data


def _attention(sweep: dict[str, Any], gpu: GPUSpec, tokens: int, backend: str) -> KernelEfficiency:
    rows = [r for r in sweep.get("attention") or [] if isinstance(r, dict)]
    mha = [r for r in rows if r.get("dim") == 128 and r.get("pass") == "fwd+bwd" and r.get("heads") == r.get("kv_heads")
           and isinstance(r.get("tflops"), int | float) and math.isfinite(r["tflops"])]
    picked = [r for r in mha if r.get("backend") == backend and r.get("seq") == tokens]
    if not picked:
        have = sorted({(r.get("backend"), r.get("seq")) for r in mha}, key=str)
        raise _problem("attention", f"no {backend} fwd+bwd row with 128-wide heads at {tokens} tokens",
                       "pick one the sweep has with --attention-backend / --attention-tokens: "
                       + (", ".join(f"{b} at {s}" for b, s in have) or "none (the sweep has no attention rows)"))
    tflops = statistics.median(r["tflops"] for r in picked)
    return KernelEfficiency(name="attention", value=round(tflops / gpu.bf16_dense_tflops, 4), measured=tflops,
                            peak=gpu.bf16_dense_tflops,
                            what=f"{backend} causal attention fwd+bwd, 128-wide heads, {tokens} tokens: "
                                 f"{tflops:.0f} TFLOP/s of {gpu.bf16_dense_tflops:.0f}")


def _hbm(sweep: dict[str, Any], gpu: GPUSpec) -> KernelEfficiency:
    copy = sweep.get("hbm") or sweep.get("copy")  # gpu_kernel_sweep.py's key; gpu_hopper_check.py's
    rate = copy.get("tbps_read_plus_write") if isinstance(copy, dict) else None
    if not isinstance(rate, int | float) or not math.isfinite(rate) or rate <= 0:
        raise _problem("hbm", "the sweep has no HBM copy", "rerun the sweep (its hbm group), or pin attention only")
    peak = gpu.hbm_bandwidth_bytes_per_s / 1e12
    return KernelEfficiency(name="hbm", value=round(rate / peak, 4), measured=rate, peak=peak,
                            what=f"device copy, read + write: {rate:.2f} TB/s of {peak:.2f}")


def sweep_efficiencies(sweep: dict[str, Any], gpu: GPUSpec, names: tuple[str, ...] = ("attention",), *,
                       attention_tokens: int = ATTENTION_TOKENS,
                       attention_backend: str = ATTENTION_BACKEND) -> tuple[KernelEfficiency, ...]:
    """The efficiencies ``names`` as fractions of ``gpu``'s datasheet peaks; every one the sweep lacks is
    listed in one error."""
    found, problems = [], []
    for name in dict.fromkeys(names):
        try:
            if name == "attention":
                found.append(_attention(sweep, gpu, attention_tokens, attention_backend))
            elif name == "hbm":
                found.append(_hbm(sweep, gpu))
            else:
                raise _problem(name, "not an efficiency a sweep measures", f"use {' or '.join(PINNABLE)}", name)
        except RecipeError as err:
            problems += err.problems
    for eff in found:
        if not 0.0 < eff.value <= 1.0:
            problems.append(Problem(path=eff.name, value=eff.value, message=f"{eff.what}: not a fraction in (0, 1] "
                                    "of the profile's peak", fix="check that the sweep ran on this profile's GPU"))
    if problems:
        raise RecipeError(problems=problems, source="kernel sweep")
    return tuple(found)


def _stated_order(name: str) -> list[str]:
    """The efficiency keys profile ``name`` states, in its order (a rewrite keeps the diff to what changed)."""
    data = yaml.safe_load(_find(canonical_name(name)).read_text(encoding="utf-8")) or {}
    block = data.get("efficiency") or {}
    return [k for k in block if k not in ("calibration", "measured")]


PIN_NOTE = "# pinned efficiency.{name}:"
"""Start of the comment line a pin writes above a profile's efficiency block: the value's source, kept by later
refits (they rewrite the block only) and replaced by the next pin of the same parameter."""
_PINNED_AFTER = re.compile(r"; (?P<name>\w+) \S+ as measured \(pinned after the fit above[^)]*\)")


def pinned(efficiency: Efficiency, found: tuple[KernelEfficiency, ...]) -> Efficiency:
    """``efficiency`` with ``found`` stated as measured. Its calibration note says so: the other values were
    fitted beside the earlier ones until ``validate --fit`` refits them (which keeps the measured values)."""
    names = {e.name for e in found}
    calibration = _PINNED_AFTER.sub(lambda m: "" if m["name"] in names else m[0], efficiency.calibration)
    calibration += "".join(f"; {e.name} {e.value:.4g} as measured (pinned after the fit above: refit the rest)"
                           for e in found)
    return replace(efficiency, **{e.name: e.value for e in found},
                   measured=(*[m for m in efficiency.measured if m not in names], *[e.name for e in found]),
                   calibration=calibration)


def pin_note(eff: KernelEfficiency, device: str, source: str) -> str:
    """The comment line citing where ``eff`` was measured."""
    return f"{PIN_NOTE.format(name=eff.name)} {eff.value:.4g} measured on {device}, {eff.what} ({source})"


def pin_measured(found: tuple[KernelEfficiency, ...], *, device: str, source: str, family: str,
                 folder: Path) -> list[Path]:
    """Write every profile of ``family`` into ``folder`` with ``found`` pinned as measured and a comment citing
    ``device`` and ``source`` (the sweep file) beside each; the paths written, all blocks built before any is."""
    notes = {PIN_NOTE.format(name=e.name): pin_note(e, device, source) for e in found}
    blocks = []
    for name in family_profiles(family):
        stated = _stated_order(name)
        fields = [*stated, *(e.name for e in found if e.name not in stated), "measured"]
        blocks.append((name, pinned(load_gpu(name).efficiency, found), fields))
    return [write_efficiency(name, eff, fields, folder, notes=notes) for name, eff, fields in blocks]


__all__ = ["ATTENTION_BACKEND", "ATTENTION_TOKENS", "PINNABLE", "PIN_NOTE", "KernelEfficiency", "pin_measured",
           "pin_note", "pinned", "read_sweep", "sweep_efficiencies"]
