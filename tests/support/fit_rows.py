"""Six H100 rows of one small model that ``primus-ext validate --fit`` fits (a Hopper family fit), as CSV files."""

from __future__ import annotations

from pathlib import Path

ARCH = ("name,num_layers,hidden,ffn_hidden,num_heads,num_kv_heads,vocab,num_experts,topk,moe_ffn_hidden,"
        "shared_experts,first_k_dense,mla(yes/no),notes\nM,8,1024,4096,16,4,32000,,,,,,no,\n")
RUN_HEADER = ("source,source_date,model,seq_len,precision,gpu,num_gpus,tp,pp,vpp,cp,ep,etp,dp,mbs,gbs,extra_flags,"
              "tokens_per_sec_per_gpu,tflops_per_gpu,mfu,step_time_s,notes\n")
CONFIGS = ((1, 1, 1, 20000), (2, 1, 1, 18000), (2, 2, 1, 15000), (4, 1, 1, 14000), (1, 1, 2, 21000),
           (4, 2, 1, 12000))
"""(TP, PP, micro-batch, tokens/s/GPU) of the six rows, 16 GPUs each."""


def fit_inputs(folder: Path) -> list[str]:
    """Write ``a.csv`` (the architecture) and ``r.csv`` (the rows) into ``folder``; the ``validate --fit`` arguments."""
    (folder / "a.csv").write_text(ARCH)
    (folder / "r.csv").write_text(RUN_HEADER + "".join(
        f"S,2025,M,4096,BF16,H100,16,{tp},{pp},,1,,,{16 // (tp * pp)},{mbs},64,,{tps},,,,\n"
        for tp, pp, mbs, tps in CONFIGS))
    return ["validate", str(folder / "r.csv"), "--archs", str(folder / "a.csv"), "--fit"]
