"""The hybrid method on a real Hopper GPU, against the published H100/H200 runs of the validation set.

Three steps, the middle one on the GPU machine (the validation CSVs stay here)::

    python benchmarks/gpu_hopper_check.py shapes --out gpu_job/shapes.jsonl          # here
    python benchmarks/gpu_hopper_check.py measure --shapes gpu_job/shapes.jsonl \\
        --out "$OUT" --budget-s 330                                                 # on the GPU
    primus-ext validate ../shared/validation/measured_throughput.csv --archs ... --hardware ... \\
        --store OUT/layers.jsonl                                                      # here

``shapes`` writes the per-rank layer shapes (dense / MoE / embedding / output) of every projectable
H100/H200 row. ``measure`` reads the GPU's kernel ceilings (bf16 and fp8 GEMM, fused attention, HBM
copy) into ``kernels.json`` and times each shape's real megatron-core layer (``measure.runner``) into a
timing store exported as ``layers.jsonl``, within a wall budget (shapes left over are listed, not
guessed). ``validate --store`` then projects the rows with the measured layers (the hybrid method:
measured layers, analytic communication / pipeline / optimizer) beside the calibrated analytic roofline
on the same rows. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # primus_ext from this checkout, installed or not (the GPU machine: not)
VALIDATION = REPO.parent / "shared" / "validation"
HOPPER = ("H100", "H200")
KIND_ORDER = {"embedding": 0, "output": 1, "dense": 2, "moe": 3}
"""The cheap kinds first: a row is projected only when every kind of it is measured."""


def _runs():
    from primus_ext.validate.archs import read_archs
    from primus_ext.validate.hardware_csv import read_hardware
    from primus_ext.validate.runs import read_runs

    archs = read_archs(VALIDATION / "model_archs.csv")
    runs = read_runs(VALIDATION / "measured_throughput.csv", archs, read_hardware(VALIDATION / "hardware_specs.csv"))
    return [r for r in runs if r.model is not None and r.gpu in HOPPER]


def cmd_shapes(args: argparse.Namespace) -> int:
    from primus_ext.model.layers import rank_shapes

    shapes: dict = {}
    for run in _runs():
        for shape in rank_shapes(run.model, run.execution).values():
            shapes.setdefault(shape, []).append(run.index)
    ordered = sorted(shapes, key=lambda s: (KIND_ORDER[s.kind], -len(shapes[s])))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(asdict(s)) + "\n" for s in ordered))
    print(f"{len(ordered)} shapes of {len({i for v in shapes.values() for i in v})} rows -> {out}")
    return 0


GEMM_SHAPES = (
    (8192, 8192, 8192),                      # the square reference (KINDS.md: ~790 TFLOP/s bf16 here)
    (8192, 28672 // 8, 8192),                # Llama-3-70B fc1 half at TP8 (ffn 28672), 8k tokens
    (8192, 8192, 28672 // 8),                # its fc2
    (8192, 8 * 128, 4096),                   # Llama-3.1-8B's K (or V) projection: 8 groups x 128, hidden 4096
    (4096, 2 * 768, 2048),                   # a Qwen3-30B-A3B expert's fc1 (gated 2 x 768, hidden 2048)
    (8192, (128 + 2 * 8) * 128 // 8, 16384),  # Llama-3.1-405B QKV at TP8 (128 heads, 8 groups, hidden 16384)
)
"""(M tokens, N outputs, K inputs) of the GEMM ceilings: the sizes the rows' per-rank layers run."""
ATTENTION_SHAPES = ((8, 8192, 128), (32, 4096, 128), (64, 2048, 128))
"""(heads, sequence, head dim) of the causal attention ceilings: few heads at long context to many at short."""


def _timed(fn, reps: int = 10, warmup: int = 3) -> float:
    """Mean milliseconds of ``fn`` over ``reps`` CUDA-event-timed calls after ``warmup``."""
    import torch
    from gpu_kernel_sweep import timed  # the benchmarks folder is on the path of a script run from it

    return timed(fn, torch.device("cuda"), reps, warmup)


def kernel_ceilings() -> dict:
    """bf16 / fp8 GEMM TFLOP/s by size, causal SDPA TFLOP/s (forward, forward+backward), HBM copy TB/s."""
    import torch
    import torch.nn.functional as F

    from primus_ext.model.roofline import ATTENTION_BWD_FACTOR

    dev = torch.device("cuda")
    out: dict = {"gemm_bf16": [], "gemm_fp8": [], "sdpa": [], "copy": {}}
    for m, n, k in GEMM_SHAPES:
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
        ms = _timed(lambda a=a, b=b: a @ b)
        out["gemm_bf16"].append({"m": m, "n": n, "k": k, "ms": ms, "tflops": 2 * m * n * k / ms / 1e9})
        try:
            a8 = a.to(torch.float8_e4m3fn)
            b8 = b.t().contiguous().t().to(torch.float8_e4m3fn)  # column-major, as cuBLASLt wants
            one = torch.ones((), device=dev)
            for fast in (False, True):  # TE's forward GEMMs accumulate fast, its backward ones do not
                ms = _timed(lambda a8=a8, b8=b8, one=one, fast=fast: torch._scaled_mm(
                    a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=fast))
                out["gemm_fp8"].append({"m": m, "n": n, "k": k, "fast_accum": fast, "ms": ms,
                                        "tflops": 2 * m * n * k / ms / 1e9})
        except (RuntimeError, TypeError) as err:  # the recipe's scaled GEMM may be missing in this torch
            out["gemm_fp8"].append({"m": m, "n": n, "k": k, "error": f"{type(err).__name__}: {err}"[:200]})
        del a, b
    for heads, seq, dim in ATTENTION_SHAPES:
        q, k, v = (torch.randn(1, heads, seq, dim, device=dev, dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        flops = 4 * heads * seq * seq * dim / 2  # causal: half the score rectangle, QK^T and PV
        fwd = _timed(lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v, is_causal=True))

        def both(q=q, k=k, v=v):
            F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()

        total = _timed(both)
        out["sdpa"].append({"heads": heads, "seq": seq, "dim": dim, "fwd_ms": fwd, "fwd_bwd_ms": total,
                            "fwd_tflops": flops / fwd / 1e9,
                            "fwd_bwd_tflops": (1 + ATTENTION_BWD_FACTOR) * flops / total / 1e9})
    x = torch.empty(2 * 1024**3, device=dev, dtype=torch.uint8)
    y = torch.empty_like(x)
    ms = _timed(lambda: y.copy_(x))
    out["copy"] = {"bytes": x.numel(), "ms": ms, "tbps_read_plus_write": 2 * x.numel() / ms / 1e9}
    return out


@contextlib.contextmanager
def _parallel(parallel_context, dev):
    """megatron's one-rank parallel state: nccl, or gloo where nccl cannot start (a sandboxed GPU machine).

    One rank runs no collective, so the backend changes no timing.
    """
    try:
        ctx = parallel_context(device=dev)
        ctx.__enter__()
    except Exception as err:  # any start failure: try the other backend, once
        print(f"nccl did not start ({type(err).__name__}: {err}); gloo instead", flush=True)
        ctx = parallel_context(device=dev, backend="gloo")
        ctx.__enter__()
    try:
        yield
    finally:
        ctx.__exit__(None, None, None)


def cmd_measure(args: argparse.Namespace) -> int:
    import torch

    from primus_ext.measure.runner import MeasureOptions, device_name, library_versions, measure_one
    from primus_ext.measure.shims import parallel_context
    from primus_ext.measure.store import TimingStore, shape_from_dict

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    dev = torch.device(args.device)
    env = {"device": device_name(dev), "versions": library_versions(), "torch": torch.__version__}
    print(json.dumps(env), flush=True)
    if not args.skip_kernels:
        try:
            kernels = kernel_ceilings()
        except Exception as err:  # a figure lost must not cost the layer measurements
            kernels = {"error": f"{type(err).__name__}: {err}"}
        (out / "kernels.json").write_text(json.dumps({**env, **kernels}, indent=1))
        print(json.dumps(kernels), flush=True)
    shapes = [shape_from_dict(json.loads(line)) for line in Path(args.shapes).read_text().splitlines()]
    opts = MeasureOptions(warmup=args.warmup, reps=args.reps, timeout_s=60.0, spawn=False)
    left = [shape.key() for shape in shapes]
    (out / "left.json").write_text(json.dumps(left))
    with TimingStore(Path(args.store), device=env["device"]) as store:
        try:
            with _parallel(parallel_context, dev):
                for i, shape in enumerate(shapes):
                    if time.monotonic() - t0 > args.budget_s:
                        break
                    m = measure_one(shape, 1.0, dev, opts)
                    store.record(m)
                    left.remove(shape.key())
                    cost = m.cost
                    line = (f"[{time.monotonic() - t0:6.1f}s] {i + 1}/{len(shapes)} {shape.kind:<9} "
                            + (f"fwd {cost.fwd_ms:8.2f} ms bwd {cost.bwd_ms:8.2f} ms" if cost else f"FAILED {m.error}"))
                    print(line[:300], flush=True)
                    store.export(out / "layers.jsonl")  # each shape: a run cut short keeps what it measured
                    (out / "left.json").write_text(json.dumps(left))
        finally:
            store.export(out / "layers.jsonl")
            (out / "left.json").write_text(json.dumps(left))
    print(f"measured {len(shapes) - len(left)} of {len(shapes)} shapes in {time.monotonic() - t0:.0f} s; "
          f"{len(left)} left for lack of time", flush=True)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    """Per layer kind: measured / calibrated-roofline time of every entry of a store, both in the dtype it ran."""
    import statistics
    from dataclasses import replace

    from primus_ext.hardware import load_gpu
    from primus_ext.measure.store import shape_from_dict
    from primus_ext.model.analytic import analytic_cost

    gpu = load_gpu(args.gpu)
    ratios: dict[str, list[tuple[float, float]]] = {}
    for line in Path(args.store).read_text().splitlines():
        row = json.loads(line)
        if row.get("table") != "layer_costs" or row.get("status") != "ok":
            continue
        shape = shape_from_dict(json.loads(row["shape_json"]))
        ran = "bf16" if row["dtype"] == "bfloat16" else shape.precision
        model = analytic_cost(replace(shape, precision=ran), gpu)
        ratios.setdefault(shape.kind, []).append((row["fwd_ms"] / model.fwd_ms, row["bwd_ms"] / model.bwd_ms))
    print(f"measured / analytic on {gpu.name}: median (min .. max)")
    for kind, pairs in sorted(ratios.items(), key=lambda kv: KIND_ORDER[kv[0]]):
        fwd, bwd = [p[0] for p in pairs], [p[1] for p in pairs]
        print(f"  {kind:<9} {len(pairs):3d} layers  fwd {statistics.median(fwd):.2f} ({min(fwd):.2f} .. "
              f"{max(fwd):.2f})  bwd {statistics.median(bwd):.2f} ({min(bwd):.2f} .. {max(bwd):.2f})")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("shapes")
    s.add_argument("--out", default="gpu_job/shapes.jsonl")
    m = sub.add_parser("measure")
    m.add_argument("--shapes", required=True)
    m.add_argument("--out", required=True)
    m.add_argument("--store", default="/tmp/primus-ext-gpu.sqlite")
    m.add_argument("--budget-s", type=float, default=300.0, help="start no layer after this many seconds")
    m.add_argument("--reps", type=int, default=5)
    m.add_argument("--warmup", type=int, default=2)
    m.add_argument("--skip-kernels", action="store_true")
    m.add_argument("--device", default="cuda", help="cpu for a dry run of the script (with small shapes)")
    c = sub.add_parser("compare", help="measured layers against the calibrated roofline, per kind")
    c.add_argument("--store", default=str(REPO / "benchmarks" / "stores" / "h200-validation-hopper-rows.jsonl"))
    c.add_argument("--gpu", default="h200", help="hardware profile the store was measured on")
    args = p.parse_args(argv)
    return {"shapes": cmd_shapes, "measure": cmd_measure, "compare": cmd_compare}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
