"""CPU shims: idempotent, and nothing of them is applied when a CUDA device is asked for."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import torch
    import megatron.core.fusions.fused_softmax as fused_softmax
    import megatron.core.tensor_parallel.random as tp_random
    from primus_ext.measure.shims import apply_cpu_shims
    before = (torch.cuda.current_device, tp_random._get_cuda_rng_state, tp_random._set_cuda_rng_state,
              fused_softmax.get_sliding_window_causal_mask)
    assert apply_cpu_shims("cuda") is False
    assert (torch.cuda.current_device, tp_random._get_cuda_rng_state, tp_random._set_cuda_rng_state,
            fused_softmax.get_sliding_window_causal_mask) == before
    assert tp_random.FP8GlobalStateManager.is_fp8_enabled() is False  # the no-TE stand-in, any device
    assert apply_cpu_shims("cpu") is True
    patched = (torch.cuda.current_device, tp_random._get_cuda_rng_state)
    assert apply_cpu_shims("cpu") is True  # idempotent: the same objects stay
    assert (torch.cuda.current_device, tp_random._get_cuda_rng_state) == patched
    assert torch.cuda.current_device() == torch.device("cpu")
    try:
        apply_cpu_shims("cuda")
    except RuntimeError as err:
        assert "fresh process" in str(err)
    else:
        raise AssertionError("a GPU run after the CPU shims must be refused")
    print("ok")
""")


def test_shims_do_not_leak_onto_cuda_and_are_idempotent():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "ok"


def test_output_discarding_recompute_and_sliding_windows_run_without_te_on_cpu(world1):
    """Shims 7 and 8: ``layernorm`` recompute (megatron's CheckpointWithoutOutput) and a windowed layer."""
    from dataclasses import replace

    import torch
    from archs import GQA

    from primus_ext.measure.build import build_layer
    from primus_ext.measure.timing import time_layer
    from primus_ext.model.rank_shape import RankShape

    shape = RankShape(kind="dense", arch=replace(GQA, window_size=(8, 0)), seq_length=64, recompute="selective",
                      recompute_modules=("layernorm",))
    built = build_layer(shape, device=world1)
    assert built.config.recompute_modules == ["layernorm"]
    attention = built.module.layers[0].self_attention.core_attention
    assert attention.scale_mask_softmax.window_size == (8, 0)
    inputs = built.make_inputs()
    out = built.module(**inputs)
    out.float().sum().backward()
    assert torch.isfinite(inputs["hidden_states"].grad).all()
    timing = time_layer(built, warmup=1, reps=2)
    assert timing.recompute.median_ms > 0  # the norm's forward re-ran inside backward


def test_biased_experts_run_without_te_on_one_rank(world1):
    """Shim 9: a biased expert's in-place fc2 bias add (GPT-OSS) on the one-rank TP all-reduce's output."""
    from dataclasses import replace

    import torch
    from archs import MOE

    from primus_ext.measure.build import build_layer

    shape = replace(_moe_shape(), arch=replace(MOE, add_bias_linear=True, moe_shared_expert_intermediate_size=0))
    built = build_layer(shape, device=world1)
    experts = built.module.layers[0].mlp.experts
    assert any(name.endswith("linear_fc2.bias") for name, _ in experts.named_parameters())
    inputs = built.make_inputs()
    built.module(**inputs).float().sum().backward()
    assert torch.isfinite(inputs["hidden_states"].grad).all()
    fc2_bias = next(p for name, p in experts.named_parameters() if name.endswith("linear_fc2.bias"))
    assert fc2_bias.grad is not None and fc2_bias.grad.abs().sum() > 0


def _moe_shape():
    from archs import MOE

    from primus_ext.model.rank_shape import RankShape

    return RankShape(kind="moe", arch=MOE, seq_length=64, ep=1)
