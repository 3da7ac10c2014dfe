"""``hardware_specs.csv`` -> GPU profiles (datasheet columns of shared/validation/hardware_specs.csv).

The CSV gives the datasheet figures; efficiency parameters (calibrated) come from the shipped profile
of the same name when there is one, so a user's own CSV with new figures keeps the calibration.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from primus_ext.errors import Problem, RecipeError
from primus_ext.hardware import canonical_name, gpu_from_mapping, list_profiles, load_gpu
from primus_ext.specs import GPUSpec
from primus_ext.validate.csvio import read_rows

COLUMNS = ("gpu", "bf16_dense_tflops", "fp8_dense_tflops", "hbm_gb", "hbm_tbps", "scaleup_gbps_per_direction",
           "scaleup_domain", "nic_gbps_per_gpu")


def read_hardware(path: str | Path) -> dict[str, GPUSpec]:
    """GPU specs keyed by canonical profile name (``H100_SXM5_80GB`` -> ``h100``)."""
    rows = read_rows(path, COLUMNS, "hardware_specs.csv")
    known = set(list_profiles())
    specs: dict[str, GPUSpec] = {}
    problems: list[Problem] = []
    for i, row in enumerate(rows):
        name = canonical_name(row["gpu"])
        base = load_gpu(name) if name in known else None
        try:
            data = {key: float(row[key]) for key in COLUMNS[1:]}
            data["fp4_dense_tflops"] = float(row.get("fp4_dense_tflops") or 0.0)  # blank: no FP4 tensor cores
            data["tdp_w"] = float(row.get("tdp_w") or 0.0)
        except ValueError as err:
            problems.append(Problem(path=f"{path}:row {i + 2}", message=f"non-numeric datasheet value: {err}"))
            continue
        data["nic_gbit_per_gpu"] = data.pop("nic_gbps_per_gpu")
        data["name"] = name
        data["gpus_per_node"] = base.gpus_per_node if base else (4 if int(data["scaleup_domain"]) == 72 else 8)
        data["family"] = base.family if base else ""
        data["vendor"] = base.vendor if base else ""
        if base is not None:  # not CSV columns: the SFU rate and where a GPU without runs takes its efficiencies
            data["sfu_exp_per_s"] = base.sfu_exp_per_s
            data["outside_allocator_gib"] = base.outside_allocator_bytes / 2**30
            data["inherits_efficiency_from"] = base.inherits_efficiency_from or None
        spec = gpu_from_mapping(data, source=f"{path}:{row['gpu']}")
        if base is not None:
            spec = replace(spec, efficiency=base.efficiency, capabilities=base.capabilities)
        specs.setdefault(name, spec)  # the first row of a GPU wins (H100_SXM5 before H100_DGX)
    if problems:
        raise RecipeError(problems=problems, source=str(path), what="invalid hardware table")
    return specs
