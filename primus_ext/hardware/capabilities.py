"""GPU capabilities as data: ``families.yaml`` (per tensor-core generation) or a profile's own ``capabilities:``.

    capabilities_of(profile_mapping, source="h100.yaml")   # (Capabilities | None, problems)
    load_gpu("b200").runs("nvfp4"), load_gpu("h100").fp8_any_layout, load_gpu("gb200").device_arch

An unknown family, an unknown key or an unknown format is a problem naming the file and the key (the profile then
does not load); a profile without ``family`` and without ``capabilities`` states none (``GPUSpec.capabilities`` is
``None``). ``families.yaml`` says what each key means and where each value comes from.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml

from primus_ext.errors import Problem
from primus_ext.specs.system import FORMATS, FP8_LAYOUTS, Capabilities, GPUSpec

FAMILIES = Path(__file__).with_name("families.yaml")
KEYS = ("formats", "fp8_layouts", "device_arch")
"""The capability keys (``specs.system.Capabilities``)."""
DESCRIPTIVE = ("vendor", "gpus", "sources")
"""Keys of a family entry that say what it is, not what it runs."""


@cache
def families() -> dict[str, Any]:
    """The shipped ``families.yaml`` (a mapping of family name -> entry)."""
    with FAMILIES.open(encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    if not isinstance(data, dict):
        raise ValueError(f"{FAMILIES}: not a mapping of family names")
    return data


def _parse(entry: Any, path: str, allowed: tuple[str, ...]) -> tuple[Capabilities | None, list[Problem]]:
    """``entry`` -> ``Capabilities`` (``path``: where it sits, for the problems)."""
    if not isinstance(entry, dict):
        return None, [Problem(path=path, value=entry, message="not a mapping",
                              fix=f"state {', '.join(KEYS)} (hardware/families.yaml says what each means)")]
    problems = [Problem(path=f"{path}.{key}", message="unknown capability", fix=f"use one of {', '.join(KEYS)}")
                for key in entry if key not in (*KEYS, *allowed)]
    problems += [Problem(path=f"{path}.{key}", message="capability not stated", fix=f"state {key}")
                 for key in KEYS if key not in entry]
    formats = entry.get("formats", [])
    if not isinstance(formats, list):
        problems.append(Problem(path=f"{path}.formats", value=formats, message="not a list of number formats",
                                fix=f"e.g. [fp8, mxfp8]; formats: {', '.join(FORMATS)}"))
        formats = []
    problems += [Problem(path=f"{path}.formats[{i}]", value=fmt, message="unknown number format",
                         fix=f"use one of {', '.join(FORMATS)} (bf16 / fp16 / fp32 need not be stated)")
                 for i, fmt in enumerate(formats) if fmt not in FORMATS]
    layouts = entry.get("fp8_layouts", "tn")
    if layouts not in FP8_LAYOUTS:
        problems.append(Problem(path=f"{path}.fp8_layouts", value=layouts, message="unknown FP8 operand layouts",
                                fix="use tn (TN only: Hopper, CDNA) or any (Blackwell)"))
    arch = entry.get("device_arch", 0)
    if not isinstance(arch, int) or isinstance(arch, bool) or arch < 0:
        problems.append(Problem(path=f"{path}.device_arch", value=arch, message="not a whole number >= 0",
                                fix="the major version torch.cuda.get_device_capability() reports, e.g. 9"))
    if problems:
        return None, problems
    return Capabilities(formats=tuple(formats), fp8_layouts=layouts, device_arch=arch), []


def capabilities_of(data: dict[str, Any], *, source: str) -> tuple[Capabilities | None, list[Problem]]:
    """A profile mapping's capabilities: its own ``capabilities:`` block, else its family's; ``None`` when it states
    neither. Problems name ``source`` and the key."""
    own, family = data.get("capabilities"), data.get("family")
    if family is not None and (not isinstance(family, str) or (family and family not in families())):
        known = ", ".join(families())
        if own is None:
            return None, [Problem(path=f"{source}:family", value=family, message="unknown GPU family",
                                  fix=f"use one of {known} (hardware/families.yaml), or state the GPU's own "
                                      "capabilities: block (formats, fp8_layouts, device_arch)")]
        if not isinstance(family, str):
            return None, [Problem(path=f"{source}:family", value=family, message="not a family name",
                                  fix=f"use one of {known} or a new name with a capabilities: block")]
    if own is not None:
        return _parse(own, f"{source}:capabilities", ())
    if not family:
        return None, []
    found, problems = _parse(families()[family], f"{FAMILIES}:{family}", DESCRIPTIVE)
    return found, problems


def fp8_problem(gpu: GPUSpec) -> str | None:
    """Why an FP8 recipe cannot train on ``gpu`` (a sentence), or ``None`` when it can or the profile does not say.
    FP8 runs where the profile's formats list it (``families.yaml``): Transformer Engine refuses FP8 below compute
    capability 8.9 ('Device compute capability 8.9 or higher required for FP8 execution', check_fp8_support), so on
    Ampere; CDNA 2 has no FP8 matrix instructions (CDNA 3 added them). Not on a device without a GPU architecture
    (``device_arch`` 0: the local CPU stand-in, whose short runs train an FP8 recipe's layers in bf16 and say so,
    ``launcher.short_run``)."""
    if gpu.runs("fp8") is not False or gpu.device_arch == 0:
        return None
    family = f" ({gpu.family})" if gpu.family else ""
    return (f"{gpu.name}{family} has no FP8 tensor cores (its profile's formats list no fp8): FP8 training cannot run "
            "there")


__all__ = ["FAMILIES", "KEYS", "capabilities_of", "families", "fp8_problem"]
