"""CPU shims: idempotent, and nothing of them is applied when a CUDA device is asked for."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import torch
    import megatron.core.tensor_parallel.random as tp_random
    from primus_ext.measure.shims import apply_cpu_shims
    before = (torch.cuda.current_device, tp_random._get_cuda_rng_state, tp_random._set_cuda_rng_state)
    assert apply_cpu_shims("cuda") is False
    assert (torch.cuda.current_device, tp_random._get_cuda_rng_state, tp_random._set_cuda_rng_state) == before
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
