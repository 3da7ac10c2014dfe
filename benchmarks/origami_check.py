"""Does AMD's GEMM model (Origami, ``rocm-origami`` on PyPI) beat the calibrated roofline on the AMD rows? (issue 45)

Run from the repository root, with the PyPI source distribution of ``rocm-origami`` (``pip download --no-deps
rocm-origami``; its wheel build needs ROCm's HIP headers, CMake fetches of rocm-cmake and nanobind from GitHub)::

    python benchmarks/origami_check.py --sdist rocm_origami-0.0.3.tar.gz [--json OUT]

What it builds: Origami's analytic core (``src/origami``, ``src/simulator``: C++17, ~4 000 lines) with g++ against a
20-line stand-in for ``<hip/hip_runtime.h>`` (the core needs only ``hipDeviceProp_t`` to read a device, which the
analytic path replaces by ``hardware_t::get_hardware_for_arch``), plus a C entry point for ctypes: the best predicted
latency of an M x N x K GEMM over macro tiles {64, 128, 256}^2 x {64, 128, 256} and occupancy 1-2, for gfx942
(MI300X / MI325X: 304 CUs, 64 KiB LDS, 4 MiB L2 per XCD, 2 100 MHz) or gfx950 (MI355X / MI350X: 256 CUs, 160 KiB LDS,
4 MiB L2, 2 400 / 2 200 MHz), CDNA 3 / CDNA 4 whitepapers and hardware_specs.csv. Nothing of Origami is copied into
the project; the build is in a temporary folder.

What it measures: the roofline's GEMM time (``roofline.gemm_seconds``: size roll-off ``F / (F + F_half)`` at a fitted
fraction of peak) replaced by Origami's latency, scaled by the same ``compute`` knob the AMD fit uses (at the plain
defaults it is Origami's latency as predicted), everything else unchanged; then the same AMD calibration
(``validate.amd``) and held-out folds as ``benchmarks/amd_calibration.py``, for both GEMM models side by side.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import sys
import tarfile
import tempfile
from functools import cache
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

STUB = """#pragma once
// host-only stand-in for <hip/hip_runtime.h>: Origami's analytic core needs only these names
#include <cstddef>
typedef int hipError_t;
struct hipDeviceProp_t { char gcnArchName[256]; int multiProcessorCount; size_t sharedMemPerBlock; int l2CacheSize;
                         int clockRate; int memoryClockRate; };
inline hipError_t hipGetDeviceProperties(hipDeviceProp_t*, int) { return 1; }
inline const char* hipGetErrorString(hipError_t) { return "no HIP runtime (analytic build)"; }
"""
WRAPPER = """#include "origami/origami.hpp"
#include <string>
#include <vector>
using namespace origami;
extern "C" double origami_gemm_seconds(const char* arch, int n_cu, int lds, int l2, int clock_khz,
                                       long m, long n, long k, int dtype, long batch) {
  try {
    auto hw = hardware_t::get_hardware_for_arch(hardware_t::arch_name_to_enum(std::string(arch)), n_cu, lds, l2,
                                                clock_khz);
    problem_t p;
    p.size = dim3_t{(size_t)m, (size_t)n, (size_t)k};
    p.batch = batch;
    p.a_transpose = transpose_t::T; p.b_transpose = transpose_t::N;
    auto in = static_cast<data_type_t>(dtype);
    p.a_dtype = in; p.b_dtype = in; p.mi_dtype = in;
    p.c_dtype = data_type_t::BFloat16; p.d_dtype = data_type_t::BFloat16;
    auto mi = hw.get_recommended_matrix_instruction(in);
    std::vector<config_t> cs;
    for (size_t mm : {64, 128, 256}) for (size_t nn : {64, 128, 256}) for (size_t kk : {64, 128, 256})
      for (int occ : {1, 2}) {
        config_t c; c.mt = dim3_t{mm, nn, kk}; c.mi = mi; c.occupancy = occ;
        if (c.is_valid() && kk >= mi.k) cs.push_back(c);
      }
    if (cs.empty()) return -2.0;
    return select_config(p, hw, cs).latency / (clock_khz * 1e3);
  } catch (...) { return -1.0; }
}
"""
HARDWARE = {  # profile -> (arch, CUs, LDS bytes, L2 bytes, clock kHz): CDNA 3 / CDNA 4 whitepapers
    "mi300x": (b"gfx942", 304, 65536, 4 * 2**20, 2100000), "mi325x": (b"gfx942", 304, 65536, 4 * 2**20, 2100000),
    "mi355x": (b"gfx950", 256, 163840, 4 * 2**20, 2400000), "mi350x": (b"gfx950", 256, 163840, 4 * 2**20, 2200000),
}
DTYPES = {"bf16": 7, "fp8": {"gfx942": 12, "gfx950": 16}}
"""Origami's data_type_t: BFloat16 = 7; FP8 is Float8_fnuz (12) on gfx942, OCP Float8 (16) on gfx950."""


def build(sdist: Path, folder: Path) -> ctypes.CDLL:
    """Origami's analytic core + the C entry point, compiled with g++ (about 30 s)."""
    if sdist.is_file():
        with tarfile.open(sdist) as tar:
            tar.extractall(folder, filter="data")
        sdist = next(p for p in folder.iterdir() if p.is_dir())
    (folder / "stub" / "hip").mkdir(parents=True, exist_ok=True)
    (folder / "stub" / "hip" / "hip_runtime.h").write_text(STUB)
    (folder / "wrap.cpp").write_text(WRAPPER)
    sources = [str(p) for p in (*sorted((sdist / "src" / "origami").glob("*.cpp")),
                                *sorted((sdist / "src" / "simulator" / "tensilelite").glob("*.cpp")))]
    lib = folder / "liborigami_c.so"
    subprocess.run(["g++", "-std=c++17", "-O2", "-fPIC", "-shared", "-I", str(sdist / "include"), "-I",
                    str(folder / "stub"), str(folder / "wrap.cpp"), *sources, "-o", str(lib)], check=True)
    cdll = ctypes.CDLL(str(lib))
    cdll.origami_gemm_seconds.restype = ctypes.c_double
    cdll.origami_gemm_seconds.argtypes = [ctypes.c_char_p, *[ctypes.c_int] * 4, *[ctypes.c_long] * 3, ctypes.c_int,
                                          ctypes.c_long]
    return cdll


def origami_gemm(cdll: ctypes.CDLL):
    """A drop-in for ``roofline.gemm_seconds`` that prices each GEMM by Origami's latency, divided by the compute
    knob's move from the plain defaults (1 at the defaults)."""
    from primus_ext.model import roofline
    from primus_ext.specs import Efficiency

    plain = Efficiency()
    fallback = roofline.gemm_seconds

    @cache
    def latency(profile: str, m: int, n: int, k: int, precision: str, count: int) -> float:
        arch, cus, lds, l2, khz = HARDWARE[profile]
        code = DTYPES["bf16"] if precision != "fp8" else DTYPES["fp8"][arch.decode()]
        return cdll.origami_gemm_seconds(arch, cus, lds, l2, khz, m, n, k, code, count)

    def gemm_seconds(m, n, k, gpu, precision, *, recipe="delayed", count=1.0):
        if gpu.name not in HARDWARE or precision not in ("bf16", "fp8") or m < 1 or n < 1 or k < 1:
            return fallback(m, n, k, gpu, precision, recipe=recipe, count=count)
        seconds = latency(gpu.name, int(m), int(n), int(k), precision, max(1, round(count)))
        if seconds <= 0:
            return fallback(m, n, k, gpu, precision, recipe=recipe, count=count)
        eff, ref = gpu.efficiency, (plain.fp8_gemm_max if precision == "fp8" else plain.gemm_max)
        return seconds * ref / (eff.fp8_gemm_max if precision == "fp8" else eff.gemm_max)

    return gemm_seconds


def figures() -> dict:
    """The AMD figures of ``amd_calibration`` under the GEMM model now in ``roofline.gemm_seconds``."""
    import amd_calibration as ac

    from primus_ext.projection import evaluate
    from primus_ext.validate.amd import fit_amd, fit_environment
    from primus_ext.validate.archs import read_archs
    from primus_ext.validate.efficiency_fit import with_efficiency
    from primus_ext.validate.hardware_csv import read_hardware
    from primus_ext.validate.holdout import leave_one_out
    from primus_ext.validate.run import analytic_projector
    from primus_ext.validate.runs import read_runs

    archs = read_archs(ac.VALIDATION / "model_archs.csv")
    amd = [r for r in read_runs(ac.VALIDATION / "mlperf_training.csv", archs,
                                read_hardware(ac.VALIDATION / "hardware_specs.csv"))
           if r.model is not None and r.system.gpu.vendor == "amd"] + ac._primus_rows(archs)
    out = {}
    for by in ("submission", "gpu", "model"):
        report = leave_one_out(amd, analytic_projector, by=by)
        out[f"leave-one-{by}-out"] = ac._summary([r.error_pct for r in report.rows if r.error_pct is not None])
    fits = fit_amd(amd, analytic_projector)
    logs = ac.log_rows()
    board = {}
    for r in logs:
        p = evaluate(r.model, r.execution, with_efficiency(r, fits["mi355x"].efficiency).system)
        board[r.model_name] = round(ac._err(p.tokens_per_s_per_gpu, r.measured_tokens_per_sec_per_gpu), 1)
    out["logs, MI355X board fit"] = board
    env, _ = fit_environment(logs, analytic_projector, fits["mi355x"].efficiency)
    both = {}
    for r in logs:
        p = evaluate(r.model, r.execution, with_efficiency(r, env).system)
        both[r.model_name] = round(ac._err(p.tokens_per_s_per_gpu, r.measured_tokens_per_sec_per_gpu), 1)
    out["logs, + links fitted on both"] = both
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sdist", required=True, type=Path, help="rocm-origami source distribution (.tar.gz or dir)")
    parser.add_argument("--json", help="write the figures as JSON to this file")
    args = parser.parse_args(argv)
    from primus_ext.model import analytic, roofline

    with tempfile.TemporaryDirectory() as folder:
        cdll = build(args.sdist, Path(folder))
        results = {"roofline": figures()}
        original = roofline.gemm_seconds
        roofline.gemm_seconds = origami_gemm(cdll)
        analytic.analytic_cost.cache_clear()
        try:
            results["origami"] = figures()
        finally:
            roofline.gemm_seconds = original
            analytic.analytic_cost.cache_clear()
    for key in results["roofline"]:
        print(f"{key}:")
        for model in ("roofline", "origami"):
            print(f"  {model:<9} {results[model][key]}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
