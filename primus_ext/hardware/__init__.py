"""GPU and cluster profiles: YAML data with sources -> ``GPUSpec`` / ``SystemSpec``.

    >>> from primus_ext.hardware import load_system
    >>> load_system("mi300x", num_nodes=4).world_size
    32

Profiles ship in ``primus_ext/hardware/profiles/<name>.yaml`` (datasheet figures with their
sources, from shared/validation/hardware_specs.csv) and name their tensor-core ``family:``, whose capabilities
(number formats, FP8 operand layouts, device arch) ``families.yaml`` states (``hardware.capabilities``; a GPU of a
new generation states its own ``capabilities:``). A profile may carry an ``efficiency:`` block
(calibrated parameters, see ``primus_ext.specs.system.Efficiency``); a user can point
``PRIMUS_EXT_PROFILES`` (os.pathsep-separated folders) at profiles of their own, which take
precedence over the shipped ones.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import math
import os
import re
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from primus_ext.errors import PrimusExtError, Problem, RecipeError
from primus_ext.files import note_input, replace_all
from primus_ext.hardware.capabilities import FAMILIES, capabilities_of
from primus_ext.hardware.curves import CURVES_FILE, curves_for
from primus_ext.hardware.host_time import HOST_FILE
from primus_ext.specs.system import Efficiency, GPUSpec, SystemSpec

PROFILE_DIR = Path(__file__).with_name("profiles")

GB = 1e9  # vendor datasheets use decimal units (GB, TB/s)
GBIT = 1e9 / 8  # bytes per second in one Gb/s

ALIASES = {
    "h100_sxm5_80gb": "h100", "h100_dgx_h100": "h100", "h100-sxm": "h100",
    "h200_sxm_141gb": "h200", "b200_hgx_dgx": "b200", "gb200_nvl72": "gb200",
    "b300_hgx_dgx": "b300", "gb300_nvl72": "gb300", "h800_sxm5_80gb": "h800", "local": "cpu",
    "a100_sxm4_80gb": "a100", "a100_80gb": "a100", "a100_sxm4_40gb": "a100_40gb", "a800_sxm4_80gb": "a800",
    "h20_hgx_96gb": "h20", "mi250x_gcd": "mi250x",
}
"""Names used by shared/validation (``H100_SXM5_80GB``, ``GB200_NVL72``...) -> profile names."""


def _profile_dirs() -> list[Path]:
    extra = os.environ.get("PRIMUS_EXT_PROFILES", "")
    return [Path(p) for p in extra.split(os.pathsep) if p] + [PROFILE_DIR]


def list_profiles() -> list[str]:
    """Names of every available profile (user folders first, then shipped)."""
    names = {p.stem for d in _profile_dirs() if d.is_dir() for p in d.glob("*.yaml") if p.is_file()}
    return sorted(names)


def canonical_name(name: str) -> str:
    key = name.strip().lower()
    return ALIASES.get(key, key)


def profile_of_device(device: str) -> str | None:
    """The profile a device name names (CUDA's ``"NVIDIA H200"`` -> ``h200``, ROCm's ``"AMD Instinct MI300X"`` ->
    ``mi300x``), if exactly one: a profile whose name's words are all words of the device name, the most specific
    (``"NVIDIA A100-SXM4-40GB"`` -> ``a100_40gb``, not ``a100``)."""
    def words_of(text: str) -> set[str]:
        return set(re.split(r"[^a-z0-9]+", text.lower())) - {""}

    words = words_of(device)
    found = {p: words_of(p) for p in list_profiles() if words_of(p) and words_of(p) <= words}
    specific = [p for p, w in found.items() if not any(w < other for other in found.values())]
    return specific[0] if len(specific) == 1 else None


def family_profiles(family: str) -> list[str]:
    """The profiles of GPU family ``family`` (``hopper`` -> ``h100``, ``h200``), by name."""
    return [name for name in list_profiles() if load_gpu(name).family == family]


def format_profiles(fmt: str) -> list[str]:
    """The profiles whose tensor cores run number format ``fmt`` (``fp8`` -> ``b200``, ``h100``, ...), for a fix
    that names them."""
    return [name for name in list_profiles() if load_gpu(name).runs(fmt)]


_PROFILE_NAME = re.compile(r"[a-z0-9][a-z0-9_.+-]{0,63}")
"""A profile name is a file stem: no path separators, no control characters, at most 64 characters."""


def _find(name: str) -> Path:
    if not _PROFILE_NAME.fullmatch(name):  # a path, a 300-character or a non-ASCII name names no profile file
        raise RecipeError(problems=[Problem(
            path="cluster", value=name, message="not a profile name (letters, digits, _ . + -, at most 64)",
            fix=f"use one of {', '.join(list_profiles())} or add a profile YAML to $PRIMUS_EXT_PROFILES")])
    for directory in _profile_dirs():
        path = directory / f"{name}.yaml"
        if path.is_file():
            note_input(path)
            return path
    raise RecipeError(
        problems=[
            Problem(
                path="cluster",
                value=name,
                message="unknown GPU / cluster profile",
                fix=f"use one of {', '.join(list_profiles())} or add a profile YAML to $PRIMUS_EXT_PROFILES",
            )
        ]
    )


_REQUIRED = (
    "bf16_dense_tflops", "fp8_dense_tflops", "hbm_gb", "hbm_tbps",
    "scaleup_gbps_per_direction", "scaleup_domain", "nic_gbit_per_gpu",
)


_POSITIVE = ("bf16_dense_tflops", "hbm_gb", "hbm_tbps", "scaleup_domain", "scaleup_gbps_per_direction")
"""Required figures every GPU has and the projection divides by (``fp8_dense_tflops`` is 0 on an A100: no FP8)."""
_OPTIONAL_NUMBERS = ("fp4_dense_tflops", "sfu_exp_per_s", "tdp_w", "outside_allocator_gib")
"""Profile figures a GPU may lack (no FP4 tensor cores, SFU rate not published): 0 / absent = none."""


def _is_number(value: Any) -> bool:
    """What YAML loaded as a number (a bool is an int to Python, not a number here; ``5e+10`` is a string)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


MAX_GPUS_PER_NODE = 1024
"""The most GPUs one node of a profile may hold (an NVL72 tray holds 4, a baseboard 8: a bound, not a figure)."""
_NOT_NUMBERS = frozenset({"calibration", "measured"})
"""Efficiency fields that are not numbers: how the block was obtained, which values were measured."""
_POSITIVE_EFFICIENCY = frozenset({"gemm_max", "fp8_gemm_max", "attention", "hbm", "scaleup_link", "scaleout_link"})
"""Efficiency fractions the projection divides by (a time is work / (peak x fraction)): above zero; every other
number of the block at least zero (issue 56: ``attention: 0`` was a ZeroDivisionError)."""


def _measured_problems(eff_data: dict[str, Any], known: set[str], source: str) -> list[Problem]:
    """``efficiency.measured``: a list of numeric efficiency names, each stated in the block, each once."""
    measured = eff_data.get("measured")
    measured = [] if measured is None else measured  # ``measured:`` left empty: nothing measured
    path = f"{source}:efficiency.measured"
    numeric = sorted(known - _NOT_NUMBERS)
    if not isinstance(measured, list):
        return [Problem(path=path, value=measured, message="not a list of efficiency parameter names",
                        fix="write a YAML list, e.g. [attention]")]
    problems = []
    for i, name in enumerate(measured):
        if not isinstance(name, str) or name not in numeric:
            problems.append(Problem(path=f"{path}[{i}]", value=name, message="not an efficiency parameter name",
                                    fix=f"use one of {', '.join(numeric)}"))
        elif name not in eff_data:
            problems.append(Problem(path=f"{path}[{i}]", value=name,
                                    message=f"{name} is listed as measured but its value is not stated",
                                    fix=f"state efficiency.{name} (the measured value) or drop it from the list"))
        elif name in measured[:i]:
            problems.append(Problem(path=f"{path}[{i}]", value=name, message="listed twice", fix="list it once"))
    return problems


def gpu_from_mapping(data: dict[str, Any], *, source: str) -> GPUSpec:
    """Build a ``GPUSpec`` from a profile mapping (datasheet units as in the YAML files)."""
    problems = [
        Problem(path=f"{source}:{key}", message="required profile field missing", fix=f"add {key}")
        for key in _REQUIRED
        if data.get(key) is None
    ]
    problems += [
        Problem(path=f"{source}:{key}", value=data[key], message="profile field is not a number",
                fix="write a number YAML reads as one (1.0e+3, not 1e+3: YAML 1.1 needs the dot)")
        for key in _REQUIRED
        if data.get(key) is not None and not _is_number(data[key])
    ]
    problems += [
        Problem(path=f"{source}:{key}", value=data[key], message="profile field is not a number",
                fix="write a number YAML reads as one (1.0e+3, not 1e+3: YAML 1.1 needs the dot), or leave it out")
        for key in _OPTIONAL_NUMBERS
        if data.get(key) is not None and not _is_number(data[key])
    ]
    problems += [
        Problem(path=f"{source}:{key}", value=data[key], message="profile field must be above zero",
                fix="write the datasheet figure (a GPU with none of it has no use as a profile)")
        for key in _POSITIVE
        if _is_number(data.get(key)) and data[key] <= 0
    ]
    eff_data = data.get("efficiency") or {}
    if not isinstance(eff_data, dict):
        raise RecipeError(problems=[*problems, Problem(
            path=f"{source}:efficiency", value=eff_data, message="efficiency must be a mapping",
            fix="write `efficiency:` then indented `gemm_max: 0.55` lines, or leave it out")])
    known = {f.name for f in dataclasses.fields(Efficiency)}
    problems += [
        Problem(path=f"{source}:efficiency.{key}", message="unknown efficiency parameter",
                fix=f"use one of {', '.join(sorted(known))}")
        for key in eff_data
        if key not in known
    ]
    problems += [
        Problem(path=f"{source}:efficiency.{key}", value=value, message="efficiency parameter is not a number",
                fix="write a number YAML reads as one (5.0e+10, not 5e+10: YAML 1.1 needs the dot)")
        for key, value in eff_data.items()
        if key in known and key not in _NOT_NUMBERS and not _is_number(value)
    ]
    problems += [
        Problem(path=f"{source}:efficiency.{key}", value=value, message="efficiency parameter out of range",
                fix="above zero: a fraction of the peak the GPU reaches" if key in _POSITIVE_EFFICIENCY else
                "zero or more")
        for key, value in eff_data.items()
        if key in known and key not in _NOT_NUMBERS and _is_number(value)
        and (value <= 0 if key in _POSITIVE_EFFICIENCY else value < 0)
    ]
    nodes = data.get("gpus_per_node", 8)
    if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= MAX_GPUS_PER_NODE:
        problems.append(Problem(path=f"{source}:gpus_per_node", value=nodes, message="not a GPU count per node",
                                fix=f"a whole number from 1 to {MAX_GPUS_PER_NODE} (8 on an HGX / OAM baseboard)"))
    measured_problems = _measured_problems(eff_data, known, source)
    problems += measured_problems
    if not measured_problems:
        eff_data = {**eff_data, "measured": tuple(eff_data.get("measured") or ())}  # YAML list -> hashable spec
    capabilities, capability_problems = capabilities_of(data, source=source)
    problems += capability_problems
    inherits = data.get("inherits_efficiency_from")
    if inherits is not None and not isinstance(inherits, str):
        problems.append(Problem(path=f"{source}:inherits_efficiency_from", value=inherits,
                                message="not a profile name", fix=f"use one of {', '.join(list_profiles())}"))
    if problems:
        raise RecipeError(problems=problems, source=source, what="invalid GPU profile")
    if inherits:  # the softmax runs on this GPU's SFUs, the efficiency was fitted at the other's rate (roofline)
        eff_data = {**eff_data, "attention_sfu_exp_per_s": load_gpu(inherits).sfu_exp_per_s}
    return GPUSpec(
        name=str(data.get("name", Path(source).stem)),
        bf16_dense_tflops=float(data["bf16_dense_tflops"]),
        fp8_dense_tflops=float(data["fp8_dense_tflops"]),
        hbm_bytes=int(float(data["hbm_gb"]) * GB),
        hbm_bandwidth_bytes_per_s=float(data["hbm_tbps"]) * 1e12,
        scaleup_bandwidth_bytes_per_s=float(data["scaleup_gbps_per_direction"]) * GB,
        scaleup_domain=int(data["scaleup_domain"]),
        nic_bandwidth_bytes_per_s=float(data["nic_gbit_per_gpu"]) * GBIT,
        gpus_per_node=int(data.get("gpus_per_node", 8)),
        family=str(data.get("family", "")),
        vendor=str(data.get("vendor", "")),
        tdp_w=float(data.get("tdp_w", 0.0)),
        fp4_dense_tflops=float(data.get("fp4_dense_tflops") or 0.0),
        sfu_exp_per_s=float(data.get("sfu_exp_per_s") or 0.0),
        outside_allocator_bytes=float(data.get("outside_allocator_gib") or 0.0) * 2**30,
        inherits_efficiency_from=inherits or "",
        sources=str(data.get("gpu", "")) + " profile " + source,
        efficiency=Efficiency(**eff_data),
        kernel_curves=curves_for(str(data.get("family", ""))),
        capabilities=capabilities,
    )


def load_gpu(name: str) -> GPUSpec:
    """The GPU profile ``name`` (case-insensitive; validation-set aliases accepted), looked up in the profile folders
    of this moment (``$PRIMUS_EXT_PROFILES`` may change between commands of one process) and parsed once per file
    state (path, inode, size, modification time: an edited or replaced profile is read again, issue 56); the file
    is an input of the command every time (``files.note_input``: no output may replace it)."""
    key = (name, os.environ.get("PRIMUS_EXT_PROFILES", ""))
    path = _FOUND.get(key)
    try:
        found = os.stat(path) if path is not None else None
    except OSError:
        found = None
    if path is None or found is None:
        path = _FOUND[key] = str(_find(canonical_name(name)))
        found = os.stat(path)
    note_input(path)
    for data in (FAMILIES, CURVES_FILE, HOST_FILE):  # the family's capabilities, kernel curves and host times: read
        note_input(data)  # once per process (and a projection's parts are memoised), inputs of every command
    return _load_gpu(path, found.st_ino, found.st_size, found.st_mtime_ns)


_FOUND: dict[tuple[str, str], str] = {}
"""(name, ``$PRIMUS_EXT_PROFILES``) -> the profile file ``_find`` chose (a lookup costs ~50 us, a stat ~1 us)."""

MAX_PROFILE_BYTES = 1 << 20
"""A GPU profile is ~3 kB of YAML; a larger file is refused unread."""


def profile_source(path: Path) -> str:
    """The text of the profile at ``path`` through the one bounded reader (``files.read_input``: a regular file, not
    a FIFO, a device or ``/proc/kmsg`` behind a link, at most ``MAX_PROFILE_BYTES``); a ``RecipeError`` otherwise."""
    from primus_ext.files import InputRefused, read_input

    try:
        return read_input(path, max_bytes=MAX_PROFILE_BYTES, what="GPU profile").decode("utf-8")
    except InputRefused as err:
        raise RecipeError(problems=[Problem(path=str(path), message=str(err))]) from None
    except UnicodeDecodeError as err:
        raise RecipeError(problems=[Problem(path=str(path), message=f"not UTF-8 text ({err.reason})")]) from None


@cache
def _load_gpu(path_text: str, _inode: int, _size: int, _mtime_ns: int) -> GPUSpec:
    from primus_ext.files import safe_yaml

    path = Path(path_text)
    try:
        data = safe_yaml.load(profile_source(path))  # bounded: 5 001 digits or 10 000 brackets are refused
    except yaml.YAMLError as err:
        raise RecipeError(problems=[Problem(path=str(path), message=f"invalid YAML: {err}")]) from None
    if not isinstance(data, dict):
        raise RecipeError(problems=[Problem(path=str(path), message="profile must be a mapping")])
    return gpu_from_mapping(data, source=str(path))


def _clear() -> None:
    _FOUND.clear()
    _load_gpu.cache_clear()


load_gpu.cache_clear = _clear  # type: ignore[attr-defined]


def load_system(cluster: str, num_nodes: int = 1) -> SystemSpec:
    """A cluster: ``num_nodes`` nodes of the profile's GPU."""
    if not isinstance(num_nodes, int) or num_nodes < 1:
        raise RecipeError(
            problems=[Problem(path="nodes", value=num_nodes, message="node count must be a positive integer",
                              fix="pass --nodes N with N >= 1")]
        )
    gpu = load_gpu(cluster)
    if num_nodes > 1 and gpu.nic_bandwidth_bytes_per_s <= 0 and gpu.scaleup_domain < num_nodes * gpu.gpus_per_node:
        raise RecipeError(problems=[Problem(
            path="nodes", value=num_nodes,
            message=f"cluster {canonical_name(cluster)} has no scale-out network (profile nic_gbit_per_gpu: 0): "
                    "it is one node, and collectives between nodes cannot be priced",
            fix="use --nodes 1 with this cluster, or a profile with a NIC bandwidth")])
    return SystemSpec(gpu=gpu, num_nodes=num_nodes, name=canonical_name(cluster))


def yaml_number(value: float) -> str:
    """``value`` to 4 significant digits as YAML 1.1 (PyYAML's ``safe_load``) reads back a number: its float
    form needs a dot in the mantissa, so ``5e+10`` (a string there) is written ``5.0e+10``. A fitted efficiency
    is finite; ``ValueError`` for inf / nan rather than a profile that fails to load."""
    if not math.isfinite(value):
        raise ValueError(f"efficiency value {value!r} is not finite")
    text = f"{value:.4g}"
    mantissa, e, exponent = text.partition("e")
    if e and "." not in mantissa:
        text = f"{mantissa}.0e{exponent}"
    return text


_DERIVED = frozenset({"calibration", "attention_sfu_exp_per_s"})
"""Efficiency fields a profile writer does not copy: the calibration line (written on its own) and the SFU rate
``inherits_efficiency_from`` sets at load."""

EFFICIENCY_HEADER = "# --- calibrated efficiency (written by `primus-ext validate --fit --write-profiles`) ---"


def _without_efficiency(text: str) -> str:
    """The profile text without its efficiency block: the calibrated block after ``EFFICIENCY_HEADER``, or a
    hand-written top-level ``efficiency:`` mapping (its indented lines), which would otherwise be a duplicate key."""
    text = text.split(EFFICIENCY_HEADER)[0]
    lines, out, inside = text.splitlines(), [], False
    for line in lines:
        if line.startswith("efficiency:"):
            inside = True
            continue
        if inside and (not line.strip() or line[:1] in (" ", "\t")):
            continue
        inside = False
        out.append(line)
    return "\n".join(out).rstrip() + "\n"


def profile_text(name: str, efficiency: Efficiency, fields: list[str], *, notes: dict[str, str] | None = None) -> str:
    """Profile ``name``'s text with ``fields`` of ``efficiency`` as its efficiency block (replacing an earlier block;
    the datasheet part and its comments are kept verbatim). Other fields of ``efficiency`` that differ from the
    ``Efficiency()`` defaults (a user's hand-set ``hbm``, say) are kept too. ``notes``: comment lines to place above
    the block, each replacing the lines that start with its key (the source of a measured value, which later refits
    keep: they rewrite the block only)."""
    text = _without_efficiency(profile_source(_find(canonical_name(name))))
    if notes:
        kept_lines = [line for line in text.splitlines() if not any(line.startswith(k) for k in notes)]
        text = "\n".join([*kept_lines, *notes.values()]) + "\n"
    defaults = Efficiency()
    kept = [f.name for f in dataclasses.fields(Efficiency) if f.name not in fields and f.name not in _DERIVED
            and getattr(efficiency, f.name) != getattr(defaults, f.name)]
    lines = [EFFICIENCY_HEADER, "efficiency:"]
    for key in (*fields, *kept):
        value = getattr(efficiency, key)
        lines.append(f"  {key}: {json.dumps(list(value)) if key == 'measured' else yaml_number(value)}")
    lines.append(f"  calibration: {json.dumps(efficiency.calibration)}")
    return text + "\n".join(lines) + "\n"


def refuse_profile_targets(targets: list[Path]) -> None:
    """Refuse, all at once, profile files that cannot be written: one that is, through a symlink or a hard link, an
    input of this command other than its own profile as the command read it (``DIR/h100.yaml`` may be the h100
    profile rewritten on purpose; a measurements CSV, a sweep, a recipe or another GPU's profile behind it is not:
    the write goes through a symlink), two targets that are one file, and every output planned (``--json``) that
    has become an input since (``files.planned_problems``)."""
    from primus_ext.files.inputs import input_problem, planned_problems

    problems = []
    seen: dict[str, Path] = {}
    for target in targets:
        own = {path for (name, _), path in _FOUND.items() if canonical_name(name) == target.stem}
        problem = input_problem(target, rewritten=own)
        real = os.path.realpath(target)
        if problem is None and real in seen:
            problem = Problem(path=str(target), message=f"is the same file as {seen[real]} ({real})",
                              fix="give each GPU profile its own file")
        seen.setdefault(real, target)
        if problem is not None:
            problems.append(problem)
    problems += planned_problems()
    if problems:
        raise RecipeError(problems=problems)


def write_profiles(texts: dict[str, str], folder: Path) -> list[Path]:
    """Write profile texts (name -> YAML) into ``folder``: every file is written first, each at a fresh temporary name
    claimed with ``O_EXCL`` (never through a symlink planted there), and only then moved into place
    (``files.replace_all``), so a full disk or a bad folder leaves the profiles as they were and no temporary file
    behind (one family's profiles must agree on what they state as measured); a target that is an input other than
    a profile is refused first (``refuse_profile_targets``). A failure is a ``PrimusExtError``
    naming the path."""
    targets = {name: folder / f"{canonical_name(name)}.yaml" for name in texts}
    refuse_profile_targets(list(targets.values()))
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for target in targets.values():
            if target.exists() and not target.is_file():
                raise IsADirectoryError(errno.EISDIR, "not a file", str(target))
        replace_all({targets[name]: text for name, text in texts.items()})
    except OSError as err:
        raise PrimusExtError(f"cannot write profiles into {folder}: {err.strerror or err} "
                             f"({err.filename or folder}); nothing was written") from None
    finally:
        load_gpu.cache_clear()
    return list(targets.values())


__all__ = ["canonical_name", "family_profiles", "format_profiles", "gpu_from_mapping", "list_profiles", "load_gpu",
           "load_system", "profile_of_device", "profile_text", "refuse_profile_targets", "write_profiles",
           "yaml_number"]
