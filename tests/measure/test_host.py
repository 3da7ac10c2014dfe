"""Host time measured from the real megatron-core modules on this CPU (``measure.host``): what it counts."""

import pytest
import torch
from archs import GQA

from primus_ext.measure.host import TOKENS, host_time, minimal
from primus_ext.measure.shims import parallel_context
from primus_ext.model.rank_shape import RankShape


@pytest.mark.filterwarnings("ignore")
def test_a_dense_layer_host_time_and_its_operators():
    shape = RankShape(kind="dense", arch=GQA, seq_length=4096, micro_batch_size=4, precision="fp8")
    small = minimal(shape, TOKENS[0])
    assert small.seq_length == TOKENS[0] and small.micro_batch_size == 1 and small.precision == "bf16"
    threads = torch.get_num_threads()
    with parallel_context(device=torch.device("cpu")):
        host = host_time(shape, reps=2, warmup=1)
    # the operators a pass dispatches: QKV, attention, projection, MLP, norms, residuals and their grads
    assert 20 <= host.fwd_ops <= 200 and host.bwd_ops >= host.fwd_ops // 2
    assert torch.get_num_threads() == threads  # measured single-threaded, the setting given back
