"""Small validation CSVs for the reader tests: the column headers of shared/validation's files, and one
call that writes an archs file and a runs file under a temporary folder and reads the runs back."""

from __future__ import annotations

from pathlib import Path

from primus_ext.validate.archs import read_archs
from primus_ext.validate.runs import read_runs

ARCH_HEADER = ("name,num_layers,hidden,ffn_hidden,num_heads,num_kv_heads,vocab,num_experts,topk,moe_ffn_hidden,"
               "shared_experts,first_k_dense,mla(yes/no),notes\n")
RUN_HEADER = ("source,source_date,model,seq_len,precision,gpu,num_gpus,tp,pp,vpp,cp,ep,etp,dp,mbs,gbs,extra_flags,"
              "tokens_per_sec_per_gpu,tflops_per_gpu,mfu,step_time_s,notes\n")
SMALL_DENSE = "M,8,1024,4096,16,4,32000,,,,,,no,\n"
"""A small dense model named ``M`` (archs line)."""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def runs_of(folder: Path, rows: str, archs: str = SMALL_DENSE):
    """``read_runs`` of ``rows`` (CSV lines under RUN_HEADER) with the archs lines ``archs``."""
    models = read_archs(write(folder, "a.csv", ARCH_HEADER + archs))
    return read_runs(write(folder, "r.csv", RUN_HEADER + rows), models)
