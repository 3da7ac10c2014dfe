"""The torch-FSDP2 and loss-phase terms of the memory model against the real modules, on CPU.

1. Bytes per parameter by dtype, per rank, of a megatron-core GPT wrapped as Megatron / Primus wrap it
   (``Float16Module``, then megatron-core's ``TorchFullyShardedDataParallel``) on a two-rank gloo group, with
   Megatron's own optimizer (``get_megatron_optimizer``, ``use_distributed_optimizer=False``): parameter and
   gradient shards, the optimizer's master copies and Adam state, the gradients the step runs on; compared
   with ``memory.state``'s bytes per parameter.
2. The order in which autograd frees the loss's saved logits: before the last transformer layer recomputes its
   forward (full recompute) or starts its backward (none), what ``memory.rank.loss_overlap`` relies on.

Test-only stand-ins for the parts that name CUDA (children of this test only): the wrapper builds its
``DeviceMesh`` on ``"cuda"``, Megatron's Float16 optimizer accepts ``torch.cuda.*Tensor`` types and makes a few
scalars on ``device='cuda'``; here the mesh is a CPU one, the type names are the CUDA ones and the scalars
live on the CPU. Nothing else is changed.
"""

from __future__ import annotations

import multiprocessing as mp

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core")

from primus_ext.model.memory.optimizer_state import adam_state_bytes  # noqa: E402
from primus_ext.model.memory.state import grad_bytes, step_grad_bytes  # noqa: E402
from primus_ext.specs import ExecutionSpec  # noqa: E402

WORLD = 2
FSDP2 = ExecutionSpec(data_parallel_size=WORLD, fsdp="torch_fsdp2", use_distributed_optimizer=False)


def _config(recompute: str | None, **kw):
    from megatron.core.transformer.transformer_config import TransformerConfig

    return TransformerConfig(num_layers=2, hidden_size=128, num_attention_heads=8, num_query_groups=4,
                             ffn_hidden_size=384, normalization="RMSNorm", gated_linear_unit=True,
                             activation_func=torch.nn.functional.silu, add_bias_linear=False,
                             use_cpu_initialization=True, bf16=True, params_dtype=torch.bfloat16,
                             recompute_granularity=recompute, recompute_method="block" if recompute else None,
                             recompute_num_layers=2 if recompute else None, transformer_impl="local", **kw)


def _gpt(cfg, vocab: int, seq: int):
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.module import Float16Module

    model = GPTModel(config=cfg, transformer_layer_spec=get_gpt_layer_local_spec(normalization="RMSNorm"),
                     vocab_size=vocab, max_sequence_length=seq, position_embedding_type="rope",
                     share_embeddings_and_output_weights=False)
    return Float16Module(cfg, model)


def _batch(vocab: int, batch: int, seq: int):
    causal = torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1)[None, None]
    return torch.randint(0, vocab, (batch, seq)), torch.arange(seq).expand(batch, seq), causal


def _cuda_names_on_cpu() -> None:
    """The stand-ins of the module docstring (child processes only)."""
    import megatron.core.distributed.torch_fully_sharded_data_parallel as wrapper
    from torch.distributed.device_mesh import DeviceMesh

    class CpuMesh:
        @staticmethod
        def from_group(group, device_type, *args, **kwargs):
            return DeviceMesh.from_group(group, "cpu", *args, **kwargs)

    wrapper.DeviceMesh = CpuMesh
    tensor_type = torch.Tensor.type

    def cuda_type(self, *args, **kwargs):
        name = tensor_type(self, *args, **kwargs)
        return name.replace("torch.", "torch.cuda.", 1) if not args and not kwargs else name

    torch.Tensor.type = cuda_type
    for name in ("tensor", "zeros", "ones", "empty", "full"):
        make = getattr(torch, name)

        def on_cpu(*args, _make=make, **kwargs):
            if str(kwargs.get("device", "")).startswith("cuda"):
                kwargs["device"] = "cpu"
            return _make(*args, **kwargs)

        setattr(torch, name, on_cpu)


def _tally(tensors) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in tensors:
        if t is None:
            continue
        local = t.to_local() if hasattr(t, "to_local") else t
        out[str(local.dtype)] = out.get(str(local.dtype), 0) + local.numel() * local.element_size()
    return out


def _fsdp2_rank(rank: int, port: int, queue) -> None:
    torch.set_num_threads(1)
    try:
        from primus_ext.measure.shims import ParallelLayout, parallel_context

        with parallel_context(ParallelLayout(world=WORLD), device="cpu", rank=rank, master_port=port):
            from megatron.core.distributed import TorchFullyShardedDataParallelConfig
            from megatron.core.distributed.torch_fully_sharded_data_parallel import TorchFullyShardedDataParallel
            from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

            _cuda_names_on_cpu()
            cfg = _config("full")
            vocab, batch, seq = 512, 2, 64
            model = _gpt(cfg, vocab, seq)
            count = sum(p.numel() for p in model.parameters())
            model = TorchFullyShardedDataParallel(cfg, TorchFullyShardedDataParallelConfig(), model)
            opt = get_megatron_optimizer(OptimizerConfig(optimizer="adam", lr=1e-4, bf16=True,
                                                         use_distributed_optimizer=False), [model])
            subs = getattr(opt, "chained_optimizers", [opt])
            main = [m for o in subs for group in o.fp32_from_float16_groups for m in group]
            params = list(model.parameters())
            out = {"count": count, "optimizers": sorted({type(o).__name__ for o in subs}),
                   "placements": sorted({str(p.placements) for p in params + main})}
            for _ in range(2):  # the second step runs with Adam's state allocated
                opt.zero_grad()
                model(*_batch(vocab, batch, seq), labels=_batch(vocab, batch, seq)[0]).float().mean().backward()
                out["params"], out["grads"], out["main"] = _tally(params), _tally(p.grad for p in params), _tally(main)
                out["state"] = _tally(v for o in subs for s in o.optimizer.state.values() for v in s.values()
                                      if torch.is_tensor(v) and v.dim())
                opt.prepare_grads()
                out["step_grads"], out["model_grads_at_step"] = _tally(m.grad for m in main), _tally(
                    p.grad for p in params)
                opt.step_with_ready_grads()
        queue.put((rank, out))
    except Exception as err:  # reported to the parent, which fails the test with it
        queue.put((rank, {"error": repr(err)}))


def test_fsdp2_bytes_per_parameter_are_what_megatron_allocates():
    from primus_ext.measure.shims import free_port

    ctx = mp.get_context("spawn")
    queue, port = ctx.Queue(), free_port()
    procs = [ctx.Process(target=_fsdp2_rank, args=(rank, port, queue)) for rank in range(WORLD)]
    for proc in procs:
        proc.start()
    results = dict(queue.get(timeout=240) for _ in procs)
    for proc in procs:
        proc.join(timeout=60)
    for rank, out in results.items():
        assert "error" not in out, (rank, out)
        per_rank = out["count"] / WORLD  # every parameter is a Shard(0) DTensor over the two ranks
        assert out["optimizers"] == ["Float16OptimizerWithFloat16Params"]
        assert out["placements"] == ["(Shard(dim=0),)"]
        assert out["params"] == {"torch.bfloat16": 2 * per_rank}
        assert out["grads"] == {"torch.bfloat16": grad_bytes(FSDP2, 2.0) * per_rank}  # bf16, not fp32
        state = out["main"]["torch.float32"] + out["state"]["torch.float32"]
        assert state == adam_state_bytes(FSDP2) * per_rank  # fp32 master + exp_avg + exp_avg_sq
        assert out["step_grads"] == {"torch.float32": step_grad_bytes(FSDP2, 2.0) * per_rank}
        assert out["model_grads_at_step"] == {}  # the bf16 gradients are freed as they are copied


@pytest.fixture(scope="module")
def one_rank_world():
    from primus_ext.measure.shims import parallel_context

    with parallel_context(device="cpu"):
        yield


@pytest.mark.parametrize("recompute", ["full", None])
def test_loss_logits_are_freed_before_the_last_layer_runs_backward(recompute, one_rank_world):
    from megatron.core.transformer.transformer_layer import TransformerLayer
    from torch.multiprocessing.reductions import StorageWeakRef

    vocab, batch, seq = 2048, 2, 96  # no weight shares the logits' element count
    model = _gpt(_config(recompute, cross_entropy_loss_fusion=True, cross_entropy_fusion_impl="native"), vocab, seq)
    saved, logits_grads, seen = [], [], []
    backward = [False]

    def pack(t):
        if t.numel() == batch * seq * vocab:
            saved.append(StorageWeakRef(t.untyped_storage()))
        return t

    def alive() -> list[bool]:
        return [not ref.expired() for ref in saved + logits_grads]

    last = [m for m in model.modules() if isinstance(m, TransformerLayer)][-1]
    def on_recompute(*_args) -> None:
        if backward[0]:
            seen.append(alive())

    def on_output(_module, _args, output) -> None:
        hidden = output[0] if isinstance(output, tuple) else output
        if hidden.requires_grad:  # the gradient reaching the last layer: its backward starts
            hidden.register_hook(lambda _grad: seen.append(alive()))

    def on_logits(_module, _args, output) -> None:
        output[0].register_hook(lambda grad: logits_grads.append(StorageWeakRef(grad.untyped_storage())))

    last.register_forward_pre_hook(on_recompute)
    last.register_forward_hook(on_output)
    model.module.output_layer.register_forward_hook(on_logits)
    tokens, position, mask = _batch(vocab, batch, seq)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(tokens, position, mask, labels=tokens)
    assert saved and alive() == [True] * len(saved)  # the loss keeps fp32 exp(logits) until its backward
    backward[0] = True
    loss.float().sum().backward()
    assert logits_grads and seen and all(state == [False] * (len(saved) + len(logits_grads)) for state in seen)
