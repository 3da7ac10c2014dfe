"""NeMo AutoModel rows state their MoE kernels in the notes ("kernels: TE + DeepEP"): DeepEP runs
through the flex dispatcher (one copy per destination domain), not the plain all-to-all."""

from primus_ext.validate.archs import read_archs
from primus_ext.validate.runs import read_runs

ARCH = ("name,num_layers,hidden,ffn_hidden,num_heads,num_kv_heads,vocab,num_experts,topk,moe_ffn_hidden,"
        "shared_experts,first_k_dense,mla(yes/no),notes\nE,4,1024,4096,16,4,32000,64,8,512,,,no,\n")
HEAD = ("source,source_date,model,seq_len,precision,gpu,num_gpus,tp,pp,vpp,cp,ep,etp,dp,mbs,gbs,extra_flags,"
        "tokens_per_sec_per_gpu,tflops_per_gpu,mfu,step_time_s,notes\n")


def test_automodel_deepep_kernels_select_flex(tmp_path):
    (tmp_path / "a.csv").write_text(ARCH)
    (tmp_path / "r.csv").write_text(HEAD + (
        "AutoModel,2026,E,4096,BF16,H100,64,1,1,,1,64,,64,1,64,"
        '"NeMo AutoModel; FSDP=64; kernels: TE + DeepEP; fake balanced gate",900,,,,\n'
        "AutoModel,2026,E,4096,BF16,H100,64,1,1,,1,64,,64,1,64,\"kernels: TE; no DeepEP here? no\",900,,,,\n"
        "NeMo,2026,E,4096,BF16,H100,64,1,1,,1,64,,64,1,64,,900,,,,\n"))
    deepep, other, plain = read_runs(tmp_path / "r.csv", read_archs(tmp_path / "a.csv"))
    assert deepep.execution.moe_token_dispatcher_type == "flex"
    assert other.execution.moe_token_dispatcher_type == "alltoall"  # DeepEP outside the kernels list
    assert plain.execution.moe_token_dispatcher_type == "alltoall"
