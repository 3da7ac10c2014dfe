"""Measure megatron-core's host time per layer pass on this CPU; write it as the project's data file.

    python benchmarks/measure_host_time.py --out primus_ext/hardware/host_time.yaml    # ~1 min on 2 cores
    python benchmarks/measure_host_time.py                                             # measure and print only

Each layer kind is built as the real megatron-core module of a shipped recipe's rank (``measure.host``: the local
spec with PyTorch's fused attention and grouped expert GEMM, bf16, one thread), run forward and backward at 8 and
32 tokens, and its host time read as the intercept at no tokens; three rounds, the median kept. The roofline takes
a layer pass as the longer of its device time and this host time when kernels are launched one by one (no CUDA
graph): ``model.host_floor.host_floor_s``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import warnings
from datetime import date
from pathlib import Path

import torch
import yaml

from primus_ext.measure.host import TOKENS, host_time
from primus_ext.measure.shims import parallel_context
from primus_ext.measure.single import _cpu_model, library_versions
from primus_ext.model.layers import rank_shapes
from primus_ext.recipe import load_recipe

REPO = Path(__file__).resolve().parents[1]
KINDS = {  # kind -> (recipe whose rank is measured, nodes): a dense GQA layer, a GQA MoE layer, the edges
    "dense": ("recipes/llama3.1_8B-pretrain.yaml", 1),
    "embedding": ("recipes/llama3.1_8B-pretrain.yaml", 1),
    "output": ("recipes/llama3.1_8B-pretrain.yaml", 1),
    "moe": ("recipes/qwen3_30B_A3B-pretrain.yaml", 2),
}


def measure(rounds: int) -> dict[str, dict]:
    out: dict[str, dict] = {}
    with parallel_context(device=torch.device("cpu")):
        for kind, (recipe, nodes) in KINDS.items():
            r = load_recipe(REPO / recipe, cluster="h100", nodes=nodes)
            shape = rank_shapes(r.model, r.execution)[kind]
            runs = [host_time(shape) for _ in range(rounds)]
            out[kind] = {
                "fwd_s": float(f"{statistics.median(h.fwd_s for h in runs):.4g}"),
                "bwd_s": float(f"{statistics.median(h.bwd_s for h in runs):.4g}"),
                "fwd_ops": runs[0].fwd_ops, "bwd_ops": runs[0].bwd_ops,
                "measured_as": f"{recipe} rank ({r.model.name}), local experts {shape.local_experts}"
                               if kind == "moe" else f"{recipe} rank ({r.model.name})",
            }
            print(f"{kind:10s} fwd {out[kind]['fwd_s'] * 1e3:6.2f} ms ({out[kind]['fwd_ops']} ops)  "
                  f"bwd {out[kind]['bwd_s'] * 1e3:6.2f} ms ({out[kind]['bwd_ops']} ops)  rounds "
                  + ", ".join(f"{h.fwd_s * 1e3:.2f}/{h.bwd_s * 1e3:.2f}" for h in runs), flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    kinds = measure(args.rounds)
    if args.out:
        doc = {"measured_on": f"cpu:{_cpu_model()}", "versions": library_versions(), "date": str(date.today()),
               "method": "megatron-core local spec with fused attention and grouped experts (bf16), one thread, "
                         f"{TOKENS[0]} and {TOKENS[1]} tokens extrapolated to none, median of rounds (measure/host.py)",
               "kinds": kinds}
        header = ("# Host time per layer pass (megatron-core's Python, autograd and torch's dispatcher), measured\n"
                  "# by benchmarks/measure_host_time.py on the CPU named below; read by hardware/host_time.py.\n")
        args.out.write_text(header + yaml.safe_dump(doc, sort_keys=False, width=120))
    return 0


if __name__ == "__main__":
    sys.exit(main())
