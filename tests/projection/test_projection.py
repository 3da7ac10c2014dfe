"""Projection sanity: scale invariance, overlap, exposed <= total, breakdown sums, sources, store costs."""

from dataclasses import replace
from types import SimpleNamespace

import pytest
from projection_specs import LLAMA
from projection_specs import MOE8 as MOE

from primus_ext.hardware import load_system
from primus_ext.model.costs import CostOrigin, LayerCost
from primus_ext.model.flops import model_flops_per_step
from primus_ext.model.layers import rank_shapes
from primus_ext.projection import evaluate, project
from primus_ext.specs import ExecutionSpec


def run(tp=1, pp=1, dp=8, gbs=64, **kw):
    return ExecutionSpec(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, data_parallel_size=dp,
                         global_batch_size=gbs, seq_length=4096, micro_batch_size=1, **kw)


def test_same_per_gpu_work_gives_similar_throughput():
    small = evaluate(LLAMA, run(tp=2, pp=2, dp=2, gbs=32), load_system("h100", 1))
    large = evaluate(LLAMA, run(tp=2, pp=2, dp=32, gbs=512), load_system("h100", 16))
    assert large.tokens_per_s_per_gpu == pytest.approx(small.tokens_per_s_per_gpu, rel=0.05)
    assert large.tokens_per_s_per_gpu <= small.tokens_per_s_per_gpu * 1.0001  # DP across nodes never helps


def test_breakdown_adds_up_and_exposed_within_total():
    ex = run(tp=4, pp=4, dp=4, gbs=128, sequence_parallel=True, use_distributed_optimizer=True,
             virtual_pipeline_model_parallel_size=2)
    p = evaluate(LLAMA, ex, load_system("h100", 8))
    assert p.breakdown.total_s == pytest.approx(p.step_time_s, rel=1e-9)
    assert {c.kind for c in p.breakdown.comms} >= {"tp", "pp", "dp_grad", "dp_param"}
    for comm in p.breakdown.comms:
        assert 0.0 <= comm.exposed_s <= comm.total_s + 1e-12, comm
    assert p.tokens_per_s_per_gpu == pytest.approx(128 * 4096 / (p.step_time_s * 64))
    flops = model_flops_per_step(LLAMA, 4096, 128)
    assert p.model_tflops_per_gpu == pytest.approx(flops / p.step_time_s / 64 / 1e12)
    assert 0 < p.mfu < 1


def test_overlap_flags_reduce_exposed_time():
    system = load_system("h100", 4)
    base = run(tp=2, dp=16, gbs=64, sequence_parallel=True, use_distributed_optimizer=True)
    plain = evaluate(LLAMA, base, system)
    overlapped = evaluate(LLAMA, replace(base, overlap_grad_reduce=True, overlap_param_gather=True,
                                         tp_comm_overlap=True), system)
    for kind in ("dp_grad", "dp_param", "tp"):
        assert overlapped.breakdown.comm(kind).exposed_s < plain.breakdown.comm(kind).exposed_s
        assert plain.breakdown.comm(kind).exposed_fraction == pytest.approx(1.0)
        assert overlapped.breakdown.comm(kind).total_s == pytest.approx(plain.breakdown.comm(kind).total_s)
    assert overlapped.step_time_s < plain.step_time_s


def test_dp_exposure_grows_when_backward_cannot_hide_it():
    """Overlapped DP comm leaves only its last bucket (+ the unhidden share) when backward is long enough,
    and grows once the gradient volume outlasts one micro-batch's backward."""
    system = load_system("h100", 8)
    long_bwd = evaluate(LLAMA, run(dp=64, gbs=64, use_distributed_optimizer=True, overlap_grad_reduce=True), system)
    short = replace(run(dp=64, gbs=64, use_distributed_optimizer=True, overlap_grad_reduce=True), seq_length=512)
    short_bwd = evaluate(LLAMA, short, system)
    lg, sg = long_bwd.breakdown.comm("dp_grad"), short_bwd.breakdown.comm("dp_grad")
    assert lg.total_s == pytest.approx(sg.total_s)  # same gradients
    assert sg.exposed_s > lg.exposed_s
    assert lg.exposed_fraction < 0.5


def test_moe_expert_parallel_comm_and_its_overlap():
    ex = run(dp=16, gbs=64, expert_model_parallel_size=16, sequence_parallel=False)
    hgx = evaluate(MOE, ex, load_system("h100", 2))
    nvl = evaluate(MOE, ex, load_system("gb200", 4))
    ep_hgx = hgx.breakdown.comm("ep")
    assert ep_hgx.total_s > 0 and "domains" in ep_hgx.group
    assert "1 domain" in nvl.breakdown.comm("ep").group
    hidden = evaluate(MOE, replace(ex, overlap_moe_expert_parallel_comm=True), load_system("h100", 2))
    assert hidden.breakdown.comm("ep").exposed_s < ep_hgx.exposed_s


def test_ep_overlap_leaves_the_unpaired_passes_exposed():
    """Combined 1F1B without pipelining: the first micro-batch's forward and the last one's backward have no
    partner (megatron-core combined_1f1b.py), so their all-to-all stays exposed: with M micro-batches the
    exposed EP time is M - 1 steady-state micro-batches plus one whole one; with one micro-batch nothing hides."""
    system = load_system("h100", 2)
    plain = run(dp=16, gbs=16, expert_model_parallel_size=16, sequence_parallel=False)

    def ep(gbs, overlap=True):
        p = evaluate(MOE, replace(plain, global_batch_size=gbs, overlap_moe_expert_parallel_comm=overlap), system)
        assert p.breakdown.total_s == pytest.approx(p.step_time_s)
        return p.num_microbatches, p.breakdown.comm("ep")

    m1, one = ep(16)
    assert m1 == 1 and one.exposed_s == pytest.approx(one.total_s) and one.total_s == ep(16, False)[1].total_s
    t = one.total_s                                       # one micro-batch's all-to-all
    m4, four = ep(64)
    x = (four.exposed_s - t) / (m4 - 1)                   # what a paired micro-batch leaves exposed
    assert 0 < x < t
    m16, sixteen = ep(256)
    assert sixteen.exposed_s == pytest.approx(t + (m16 - 1) * x)
    assert sixteen.exposed_s / sixteen.total_s < four.exposed_s / four.total_s < 1


def test_zero_bubble_without_pipelining_runs_the_combined_1f1b():
    """PP=1 runs megatron-core's no-pipelining schedule whatever the zero-bubble setting: under EP overlap its
    first forward and last backward leave their all-to-all exposed as with 1F1B."""
    system = load_system("h100", 2)
    ex = run(dp=16, gbs=64, expert_model_parallel_size=16, sequence_parallel=False,
             overlap_moe_expert_parallel_comm=True)
    plain, zb = evaluate(MOE, ex, system), evaluate(MOE, replace(ex, pipeline_schedule="zb-h1"), system)
    assert zb.step_time_s == pytest.approx(plain.step_time_s)
    assert zb.breakdown.comm("ep").exposed_s == pytest.approx(plain.breakdown.comm("ep").exposed_s)


class FakeStore:
    """A CostProvider that knows only the dense layer, labelled as measured."""

    def __init__(self, shape):
        self.shape = shape

    def cost(self, shape):
        if shape == self.shape:
            return LayerCost(fwd_ms=10.0, bwd_ms=20.0, wgrad_ms=8.0, origin=CostOrigin.parse("measured:fake"))
        return None


def test_measured_costs_are_used_and_labelled():
    ex = run(dp=1, gbs=4)
    system = load_system("h100", 1)
    system = replace(system, num_nodes=1)
    ex = replace(ex, data_parallel_size=1)
    store = FakeStore(rank_shapes(LLAMA, ex)["dense"])
    p = evaluate(LLAMA, ex, system, store)
    assert p.sources["dense"] == "measured:fake" and p.sources["output"] == "analytic"
    analytic = evaluate(LLAMA, ex, system)
    assert analytic.sources["dense"] == "analytic"
    edges = analytic.breakdown.compute_s - 4 * 16 * sum(
        (c.fwd_ms + c.bwd_ms) * 1e-3 for c in [_analytic_dense(ex, system)])
    assert p.breakdown.compute_s == pytest.approx(4 * 16 * 0.030 + edges)


def test_graphed_measured_layers_keep_their_cost_and_say_so():
    system = replace(load_system("h100", 1), num_nodes=1)
    ex = replace(run(dp=1, gbs=4), data_parallel_size=1, cuda_graph="full_iteration")
    store = FakeStore(rank_shapes(LLAMA, ex)["dense"])
    measured = project(LLAMA, ex, system, store, memory=False, band=False)
    eager = project(LLAMA, replace(ex, cuda_graph="none"), system, FakeStore(rank_shapes(LLAMA, replace(
        ex, cuda_graph="none"))["dense"]), memory=False, band=False)
    assert any("CUDA graphs (full_iteration)" in n for n in measured.notes)
    assert not any("CUDA graphs" in n for n in project(LLAMA, ex, system, memory=False, band=False).notes)
    assert measured.breakdown.overhead_s == 0 < eager.breakdown.overhead_s
    assert measured.step_time_s < eager.step_time_s  # the analytic embedding / output kinds lose their launches


def _analytic_dense(ex, system):
    from primus_ext.model.analytic import analytic_cost

    return analytic_cost(rank_shapes(LLAMA, ex)["dense"], system.gpu)


def test_projection_reads_measured_costs_from_the_timing_store(tmp_path):
    from primus_ext.measure.store import TimingStore

    ex = run(dp=1, gbs=2)
    system = load_system("cpu", 1)
    shape = rank_shapes(LLAMA, ex)["dense"]
    cost = LayerCost(fwd_ms=123.0, bwd_ms=246.0, wgrad_ms=100.0, origin=CostOrigin.parse("measured:cpu-test"))
    m = SimpleNamespace(cost=cost, target=shape, shape=shape, dtype="bf16", device="cpu-test", versions="v",
                        scale=1.0, error=None, host="h", date="2026-01-01", reps=3, warmup=1, world=1,
                        mode="per-rank", spec="local", notes=())
    with TimingStore(tmp_path / "t.sqlite", device="cpu-test", versions="v") as store:
        store.record(m)
        p = evaluate(LLAMA, ex, system, store)
    assert p.sources["dense"] == "measured:cpu-test"
    assert p.stages[0].fwd_s[0] >= 16 * 0.123


def test_project_adds_timeline_band_and_schedules():
    ex = run(pp=4, dp=2, gbs=16)
    p = project(LLAMA, ex, load_system("h100", 1))
    assert len(p.timeline) == 2 * 4 * 8
    low, high = p.band
    assert low < p.tokens_per_s_per_gpu < high
    zb = evaluate(LLAMA, replace(ex, pipeline_schedule="zb-h1"), load_system("h100", 1))
    assert zb.breakdown.bubble_s < p.breakdown.bubble_s
    assert len(p.stages) == 4 and p.stages[0].embedding and p.stages[-1].output


def test_bad_batch_is_a_domain_error():
    from primus_ext.errors import InfeasibleConfig

    with pytest.raises(InfeasibleConfig):
        evaluate(LLAMA, run(dp=8, gbs=12), load_system("h100", 1))


@pytest.mark.parametrize("changes", [
    {"context_parallel_size": 2, "cp_comm_type": "p2p"},
    {"context_parallel_size": 2, "cp_comm_type": "a2a"},
    {"context_parallel_size": 2, "cp_comm_type": "allgather"},
    {"fsdp": "torch_fsdp2"},
    {"fsdp": "megatron_fsdp", "data_parallel_sharding_strategy": "optim_grads_params"},
    {"fsdp": "megatron_fsdp", "data_parallel_sharding_strategy": "optim_grads"},
    {"moe_token_dispatcher_type": "allgather"},
    {"pipeline_schedule": "zb-h1", "pipeline_model_parallel_size": 2},
    {"recompute_granularity": "full", "recompute_method": "block", "recompute_num_layers": 1},
    {"grad_reduce_in_bf16": True, "use_distributed_optimizer": True},
])
def test_every_comm_path_keeps_the_breakdown_consistent(changes):
    ex = replace(run(tp=2, dp=4, gbs=32, expert_model_parallel_size=4, sequence_parallel=True), **changes)
    ex = replace(ex, data_parallel_size=16 // (ex.tp * ex.pp * ex.cp))
    p = evaluate(MOE, ex, load_system("h100", 2))
    assert p.breakdown.total_s == pytest.approx(p.step_time_s, rel=1e-9)
    for comm in p.breakdown.comms:
        assert 0.0 <= comm.exposed_s <= comm.total_s + 1e-12, comm
    kinds = {c.kind for c in p.breakdown.comms}
    if ex.cp > 1:
        assert "cp" in kinds
    if ex.fsdp == "torch_fsdp2" or ex.data_parallel_sharding_strategy == "optim_grads_params":
        assert "fsdp" in kinds and "dp_grad" not in kinds


def test_fsdp_and_recompute_cost_time():
    base = run(dp=8, gbs=32)
    system = load_system("h100", 1)
    plain = evaluate(LLAMA, base, system)
    full = evaluate(LLAMA, replace(base, recompute_granularity="full", recompute_method="uniform",
                                   recompute_num_layers=1), system)
    assert full.breakdown.recompute_s > 0 and full.step_time_s > plain.step_time_s
    block = evaluate(LLAMA, replace(base, recompute_granularity="full", recompute_method="block",
                                    recompute_num_layers=4), system)
    assert plain.step_time_s < block.step_time_s < full.step_time_s


def test_unhashable_provider_and_memo():
    from dataclasses import dataclass

    @dataclass
    class Mutable:  # eq=True -> unhashable
        calls: int = 0

        def cost(self, shape):
            self.calls += 1
            return None

    ex, system = run(dp=8, gbs=32), load_system("h100", 1)
    provider = Mutable()
    assert evaluate(LLAMA, ex, system, provider).sources["dense"] == "analytic"
    assert provider.calls > 0
    assert evaluate(LLAMA, ex, system) is evaluate(LLAMA, ex, system)  # revisits are memoised
