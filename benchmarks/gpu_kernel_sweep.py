"""Kernel ceilings of one GPU by size: the physical curves behind the roofline's fitted efficiencies.

Run on the GPU machine (no megatron needed; ~20 s on an H200: the committed sweep timed its groups in 9 s)::

    python benchmarks/gpu_kernel_sweep.py --out "$OUT/sweep.json"
    python benchmarks/gpu_kernel_sweep.py --out /tmp/sweep.json --device cpu --small   # dry run here
    primus-ext profile pin sweep.json [--out primus_ext/hardware/profiles]   # then, anywhere: pin what it measured

Measures, each the mean of CUDA-event-timed calls after warm-up:

- dense GEMMs ``M x N x K`` (M tokens; N, K the per-rank weight sizes of the validation rows) in bf16,
  FP8 with one scale per tensor (TE's delayed / current scaling; fast and exact accumulation) and FP8
  with row-wise scales (``fp8_rowwise_ratio`` of the Hopper profile is fitted; this is its kernel value);
- grouped GEMMs of MoE experts (``torch._grouped_mm``, bf16) by tokens per expert;
- causal attention forward and forward + backward with each SDPA backend PyTorch offers (flash =
  FlashAttention-2, cuDNN = the kernel family TE's fused attention calls, memory-efficient) and with the
  default choice, by head dim (64, 128, MLA's 192 / 128) and sequence;
- an HBM copy (device to device, bytes read + written);
- the host floor (``--host``, needs megatron-core): the process CPU time of one forward and one backward pass of the
  real dense and MoE layers of two shipped recipes at minimal size on the device (``primus_ext.measure.host``), the
  training host's own figure for ``hardware/host_time.yaml``'s (measured on a CPU): ``--summarize`` prints their
  ratio, the ``Efficiency.host_factor`` this host implies.

Prints one line per measurement and writes them all to ``--out`` (rewritten after each group, so a run
cut short keeps what it measured). Figures, not assertions: `RESULTS.md` reads them against the
calibrated Hopper profile.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # primus_ext from this checkout, installed or not (the GPU machine: not)

from primus_ext.model.roofline import ATTENTION_BWD_FACTOR  # noqa: E402

GEMM_NK = ((1024, 4096), (1536, 2048), (3072, 4096), (4096, 4096), (6144, 4096), (14336, 4096),
           (4096, 14336), (3584, 8192), (8192, 3584), (8192, 8192), (2304, 16384), (6656, 16384))
"""(N, K) per-rank weights of validation-row layers: Llama-3.1-8B's K (or V), its Q / O, fused QKV, fc1 half and
fc2 (TP1); Qwen3-30B-A3B's and Qwen3-235B-A22B's gated expert fc1 (2 x 768 by 2048, 2 x 1536 by 4096);
Llama-3-70B's fc1 half and fc2 at TP8 (28672 / 8) and an 8192-square projection; Llama-3.1-405B's QKV and fc1
half at TP8 ((128 + 2 x 8) x 128 / 8 and 53248 / 8, by 16384)."""
GEMM_M = (1024, 2048, 4096, 8192, 16384)
GROUPED = ((2 * 768, 2048), (2 * 1536, 4096), (2 * 2048, 7168))
"""Expert fc1 (gated) of Qwen3-30B-A3B, Qwen3-235B-A22B and DeepSeek-V3: (N, K)."""
GROUPED_EXPERTS = (4, 16)
GROUPED_TOKENS = (128, 512, 2048, 8192)
ATTENTION = ((64, 64, 4096), (64, 128, 2048), (32, 128, 4096), (16, 128, 8192), (8, 128, 16384),
             (32, 64, 4096), (16, 192, 4096), (32, 128, 4096, 8), (16, 128, 8192, 2))
"""(heads, head dim, sequence[, key-value heads]); head dim 192 is MLA's query-key width with a value width
of 128; with key-value heads, grouped-query attention through ``enable_gqa`` (as ``measure/attention.py``)."""


def timed(fn, device: torch.device, reps: int, warmup: int = 3) -> float:
    """Mean milliseconds of ``fn``."""
    for _ in range(warmup):
        fn()
    if device.type != "cuda":
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - t0) * 1e3 / reps
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def _try(rows: list, row: dict, fn, flops: float, device: torch.device, reps: int) -> None:
    try:
        ms = timed(fn, device, reps)
        row.update(ms=ms, tflops=flops / ms / 1e9)
    except Exception as err:  # a kernel missing on this build: record it, keep sweeping
        row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:160]}"
    rows.append(row)
    print(json.dumps(row), flush=True)


def gemms(device: torch.device, scale: int, reps: int) -> list:
    rows: list = []
    for n_full, k_full in GEMM_NK:
        n, k = n_full // scale, k_full // scale
        for m_full in GEMM_M:
            m = m_full // scale
            a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
            b = torch.randn(n, k, device=device, dtype=torch.bfloat16).t()  # column-major: weights as stored
            flops = 2.0 * m * n * k
            base = {"op": "gemm", "m": m, "n": n, "k": k}
            _try(rows, {**base, "dtype": "bf16"}, lambda a=a, b=b: a @ b, flops, device, reps)
            a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
            one = torch.ones((), device=device)
            for fast in (False, True):
                _try(rows, {**base, "dtype": "fp8_tensorwise", "fast_accum": fast},
                     lambda a8=a8, b8=b8, one=one, fast=fast: torch._scaled_mm(
                         a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=fast),
                     flops, device, reps)
            sa = torch.ones(m, 1, device=device, dtype=torch.float32)
            sb = torch.ones(1, n, device=device, dtype=torch.float32)
            _try(rows, {**base, "dtype": "fp8_rowwise", "fast_accum": True},
                 lambda a8=a8, b8=b8, sa=sa, sb=sb: torch._scaled_mm(
                     a8, b8, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, use_fast_accum=True),
                 flops, device, reps)
    return rows


def grouped(device: torch.device, scale: int, reps: int) -> list:
    rows: list = []
    for n, k in GROUPED:
        for experts in GROUPED_EXPERTS:
            for tokens in GROUPED_TOKENS:
                n_, k_, t_ = n // scale, k // scale, max(16, tokens // scale)
                a = torch.randn(experts * t_, k_, device=device, dtype=torch.bfloat16)
                w = torch.randn(experts, n_, k_, device=device, dtype=torch.bfloat16).transpose(-2, -1)
                offs = torch.arange(1, experts + 1, device=device, dtype=torch.int32) * t_
                _try(rows, {"op": "grouped_gemm", "experts": experts, "tokens_per_expert": t_, "n": n_, "k": k_,
                            "dtype": "bf16"},
                     lambda a=a, w=w, offs=offs: torch._grouped_mm(a, w, offs=offs),
                     2.0 * experts * t_ * n_ * k_, device, reps)
    return rows


def attention(device: torch.device, scale: int, reps: int) -> list:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {"default": None, "flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION}
    rows: list = []
    for heads, dim, seq, *groups in ATTENTION:
        seq, kv = seq // scale, groups[0] if groups else heads
        vdim = 128 if dim == 192 else dim
        q = torch.randn(1, heads, seq, dim, device=device, dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(1, kv, seq, dim, device=device, dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(1, kv, seq, vdim, device=device, dtype=torch.bfloat16, requires_grad=True)
        flops = 2.0 * heads * seq * seq * (dim + vdim) / 2  # causal: half the score rectangle, QK^T and PV
        for name, backend in backends.items():
            def fwd(q=q, k=k, v=v, backend=backend, kv=kv, heads=heads):
                with contextlib.nullcontext() if backend is None else sdpa_kernel([backend]):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kv != heads)

            def both(fwd=fwd, inputs=(q, k, v)):
                torch.autograd.grad(fwd().sum(), inputs)  # no .grad accumulated across repetitions

            base = {"op": "attention", "backend": name, "heads": heads, "kv_heads": kv, "dim": dim, "vdim": vdim,
                    "seq": seq}
            _try(rows, {**base, "pass": "fwd"}, fwd, flops, device, reps)
            _try(rows, {**base, "pass": "fwd+bwd"}, both, (1 + ATTENTION_BWD_FACTOR) * flops, device, reps)
    return rows


def hbm_copy(device: torch.device, scale: int, reps: int) -> dict:
    """TB/s of a device-to-device copy of 2 GiB, bytes read + written (``hbm`` of a profile is its fraction)."""
    x = torch.empty(2 * 1024**3 // scale, device=device, dtype=torch.uint8)
    y = torch.empty_like(x)
    ms = timed(lambda: y.copy_(x), device, reps)
    return {"bytes": x.numel(), "ms": ms, "tbps_read_plus_write": 2 * x.numel() / ms / 1e9}


HOST_RECIPES = {"dense": ("recipes/llama3.1_8B-pretrain.yaml", 1), "moe": ("recipes/qwen3_30B_A3B-pretrain.yaml", 2)}
"""The layers ``benchmarks/measure_host_time.py`` measured for ``hardware/host_time.yaml``: the same, on the device."""


def host(device: torch.device, scale: int, reps: int) -> dict:
    """Host seconds per pass of the dense and MoE layers at minimal size on ``device`` (``measure.host``)."""
    del scale  # already minimal
    from primus_ext.measure.host import host_time
    from primus_ext.measure.shims import parallel_context
    from primus_ext.model.layers import rank_shapes
    from primus_ext.recipe import load_recipe

    out = {}
    with parallel_context(device=device):
        for kind, (recipe, nodes) in HOST_RECIPES.items():
            r = load_recipe(REPO / recipe, cluster="h100", nodes=nodes)
            h = host_time(rank_shapes(r.model, r.execution)[kind], reps=reps, device=device)
            out[kind] = {"fwd_s": h.fwd_s, "bwd_s": h.bwd_s, "fwd_ops": h.fwd_ops, "bwd_ops": h.bwd_ops}
            print(json.dumps({"host": kind, **out[kind]}), flush=True)
    return out


def _peak_bf16(device: str) -> float:
    """Dense BF16 peak (TFLOP/s, datasheet) of the profile the sweep's device name names; NaN without one."""
    from primus_ext.hardware import load_gpu, profile_of_device

    name = profile_of_device(device)
    return load_gpu(name).bf16_dense_tflops if name else float("nan")


def summarize(result: dict) -> list[str]:
    """The figures `RESULTS.md` quotes, from a sweep's JSON: ranges and ratios per kernel family (fractions of
    peak over the datasheet peak of the profile the device name names)."""
    import statistics

    peak = _peak_bf16(result.get("device", ""))

    def rate(row: dict) -> float:
        return row.get("tflops", float("nan"))

    gemm = {(r["m"], r["n"], r["k"], r["dtype"], r.get("fast_accum")): rate(r) for r in result["gemm"]}
    large = [key for key in gemm if key[0] >= 4096]
    lines = []
    for dtype in ("bf16", "fp8_tensorwise", "fp8_rowwise"):
        v = [gemm[key] for key in large if key[3] == dtype]
        lines.append(f"{dtype} GEMM, M >= 4096: {min(v):.0f} .. {max(v):.0f} TFLOP/s")
    sizes = (("large (M >= 4096)", lambda f, m: m >= 4096), ("small (<= 17 GFLOP)", lambda f, m: f <= 17.2e9))
    for label, pick in sizes:
        for fast in (False, True):
            ratio = [gemm[(m, n, k, "fp8_tensorwise", fast)] / v
                     for (m, n, k, d, _), v in gemm.items() if d == "bf16" and pick(2.0 * m * n * k, m)]
            lines.append(f"fp8 / bf16, {label}, {'fast' if fast else 'exact'} accumulation: median "
                         f"{statistics.median(ratio):.2f} ({min(ratio):.2f} .. {max(ratio):.2f})")
    row = [v / gemm[(m, n, k, "fp8_tensorwise", True)] for (m, n, k, d, _), v in gemm.items() if d == "fp8_rowwise"]
    lines.append(f"fp8 row-wise / per-tensor: median {statistics.median(row):.2f} ({min(row):.2f} .. {max(row):.2f})")
    for tokens in GROUPED_TOKENS:
        v = [rate(r) for r in result["grouped"] if r["tokens_per_expert"] == tokens]
        lines.append(f"grouped GEMM bf16, {tokens} tokens per expert: {min(v):.0f} .. {max(v):.0f} TFLOP/s")
    att = {(r["backend"], r["heads"], r["kv_heads"], r["dim"], r["seq"], r["pass"]): rate(r)
           for r in result["attention"]}
    full = [(h, s) for (b, h, kv, d, s, p) in att if b == "cudnn" and d == 128 and kv == h and p == "fwd+bwd"]
    for h, seq in sorted(full, key=lambda hs: hs[1]):
        cudnn, flash = att[("cudnn", h, h, 128, seq, "fwd+bwd")], att[("flash", h, h, 128, seq, "fwd+bwd")]
        lines.append(f"attention fwd+bwd, 128-wide, {seq} tokens: cuDNN {cudnn:.0f} TFLOP/s = {cudnn / peak:.2f} "
                     f"of peak, flash / cuDNN {flash / cudnn:.2f}")
    d64, d128 = att[("cudnn", 32, 32, 64, 4096, "fwd+bwd")], att[("cudnn", 32, 32, 128, 4096, "fwd+bwd")]
    lines.append(f"attention fwd+bwd, 64- / 128-wide heads at 4096 tokens (cuDNN): {d64 / d128:.3f}")
    if result.get("host"):
        from primus_ext.hardware.host_time import host_time_of, measured_on

        for kind, h in result["host"].items():
            ref = host_time_of(kind)
            ratio = (h["fwd_s"] + h["bwd_s"]) / (ref.fwd_s + ref.bwd_s) if ref and ref.fwd_s + ref.bwd_s > 0 else 0.0
            lines.append(f"host floor, {kind} layer: {h['fwd_s'] * 1e3:.2f} / {h['bwd_s'] * 1e3:.2f} ms per forward / "
                         f"backward pass here, x{ratio:.2f} of hardware/host_time.yaml ({measured_on()}): the "
                         "host_factor this host implies")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", help="where to write the sweep's JSON (required unless --summarize)")
    p.add_argument("--summarize", metavar="JSON", help="print the figures RESULTS.md quotes from a sweep's JSON")
    p.add_argument("--device", default="cuda")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--small", action="store_true", help="sizes / 16: a dry run of the script on a CPU")
    p.add_argument("--host", action="store_true", help="also the host floor of megatron-core's layers (megatron-core)")
    args = p.parse_args(argv)
    if args.summarize:
        print("\n".join(summarize(json.loads(Path(args.summarize).read_text()))))
        return 0
    if not args.out:
        p.error("--out is required (or --summarize JSON)")
    device, scale = torch.device(args.device), 16 if args.small else 1
    out = Path(args.out)
    result: dict = {"torch": torch.__version__,
                    "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu"}
    if device.type == "cuda":
        result["cudnn"] = torch.backends.cudnn.version()
        result["sdpa_enabled"] = {n: getattr(torch.backends.cuda, f"{n}_sdp_enabled")()
                                  for n in ("flash", "mem_efficient", "math", "cudnn")}
    print(json.dumps(result), flush=True)
    groups = (("hbm", hbm_copy), ("attention", attention), ("gemm", gemms), ("grouped", grouped))
    for name, fn in (*groups, *((("host", host),) if args.host else ())):
        t0 = time.monotonic()
        result[name] = fn(device, scale, args.reps)
        result[f"{name}_s"] = time.monotonic() - t0
        out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
