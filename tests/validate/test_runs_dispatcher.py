"""NeMo AutoModel rows state their MoE kernels in the notes ("kernels: TE + DeepEP"): DeepEP runs
through the flex dispatcher (one copy per destination domain), not the plain all-to-all."""

from validate_rows import runs_of


def test_automodel_deepep_kernels_select_flex(tmp_path):
    deepep, other, plain = runs_of(tmp_path, (
        "AutoModel,2026,E,4096,BF16,H100,64,1,1,,1,64,,64,1,64,"
        '"NeMo AutoModel; FSDP=64; kernels: TE + DeepEP; fake balanced gate",900,,,,\n'
        "AutoModel,2026,E,4096,BF16,H100,64,1,1,,1,64,,64,1,64,\"kernels: TE; no DeepEP here? no\",900,,,,\n"
        "NeMo,2026,E,4096,BF16,H100,64,1,1,,1,64,,64,1,64,,900,,,,\n"),
        archs="E,4,1024,4096,16,4,32000,64,8,512,,,no,\n")
    assert deepep.execution.moe_token_dispatcher_type == "flex"
    assert other.execution.moe_token_dispatcher_type == "alltoall"  # DeepEP outside the kernels list
    assert plain.execution.moe_token_dispatcher_type == "alltoall"
