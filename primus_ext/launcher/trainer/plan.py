"""What one built-in training run does: the layout, the batch, and the checks before spawning.

``plan_run(model, execution, world_size=2, iters=5)`` derives DP from the world size (world =
TP * PP * CP * DP, Megatron's order) and the micro-batches per step (GBS / (MBS * DP)), and reports
everything the built-in trainer cannot run as ``Problem``s (a ``RecipeError``, exit code 2).

Torch-free: the CLI plans (and refuses) before importing megatron.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from primus_ext.errors import Problem, RecipeError
from primus_ext.measure.quiet import MEGATRON_NOTES
from primus_ext.specs import ExecutionSpec, ModelSpec

QUIET_WARNINGS = MEGATRON_NOTES
"""megatron-core's import-time UserWarnings without TE/Apex (every rank would repeat them)."""


@dataclass(frozen=True, kw_only=True)
class TrainPlan:
    """A fully resolved built-in training run (picklable: it is sent to every spawned rank)."""

    model: ModelSpec
    execution: ExecutionSpec
    """With ``data_parallel_size`` set from the world size."""
    world_size: int
    iters: int
    warmup: int
    device: str
    """``cpu`` or ``cuda``."""
    seed: int = 1234
    lr: float = 1.0e-4
    threads_per_rank: int = 1
    """CPU threads per rank (``cores // world`` keeps gloo ranks from oversubscribing)."""
    time_collectives: bool = False
    """Also count each rank's seconds blocked inside collectives per step, and the part of them
    spent waiting for a peer to arrive (``comm_timer.py``). CPU (gloo) only: an NCCL call returns
    once enqueued on the stream, so host clocks would time the launch, not the transfer."""

    @property
    def num_microbatches(self) -> int:
        return self.execution.num_microbatches

    @property
    def tokens_per_step(self) -> int:
        return self.execution.global_batch_size * self.execution.seq_length


def tiny_model(**overrides: object) -> ModelSpec:
    """A small Llama-shaped GPT for CPU runs (2 layers, hidden 128, GQA 4/2, SwiGLU, RMSNorm, RoPE)."""
    fields: dict[str, object] = dict(
        name="tiny-gpt", num_layers=2, hidden_size=128, ffn_hidden_size=256, num_attention_heads=4,
        num_query_groups=2, kv_channels=32, vocab_size=512, max_position_embeddings=256,
    )
    fields.update(overrides)
    return ModelSpec(**fields)  # type: ignore[arg-type]


def _problems(model: ModelSpec, e: ExecutionSpec, world_size: int, iters: int, warmup: int,
              device: str) -> list[Problem]:
    out: list[Problem] = []
    mp = e.tp * e.pp * e.cp
    if world_size < 1 or world_size % mp:
        out.append(Problem(path="world_size", value=world_size,
                           message=f"must be a multiple of TP*PP*CP = {mp}", fix=f"use a multiple of {mp}"))
        return out
    dp = world_size // mp
    if e.cp > 1:
        out.append(Problem(path="context_parallel_size", value=e.cp,
                           message="the built-in trainer does not run context parallelism",
                           fix="set context_parallel_size=1 (or launch through Primus / Megatron-LM)"))
    if e.ep > 1 and (world_size // (e.etp * e.pp)) % e.ep:
        out.append(Problem(path="expert_model_parallel_size", value=e.ep,
                           message=f"does not divide world/(ETP*PP) = {world_size // (e.etp * e.pp)}"))
    if device == "cpu" and e.pp > 1 and not model.untie_embeddings_and_output_weights:
        out.append(Problem(path="untie_embeddings_and_output_weights", value=False,
                           message="tied embeddings under PP>1 need CUDA in megatron-core 0.16 (the first/last "
                                   "stage weight sync calls weight.data.cuda())",
                           fix="set untie_embeddings_and_output_weights=true for CPU runs, or use PP=1"))
    if model.multi_latent_attention:
        out.append(Problem(path="multi_latent_attention", value=True,
                           message="the built-in trainer builds MHA/GQA models only",
                           fix="train MLA models through Primus / Megatron-LM"))
    if model.hybrid_layer_pattern:
        out.append(Problem(path="model_type", value="mamba",
                           message="the built-in trainer builds GPT models only (a hybrid Mamba model is projected, "
                                   "not trained: its scan kernels need mamba-ssm on a GPU)",
                           fix="train hybrid models through Primus / Megatron-LM"))
    if e.global_batch_size % (e.micro_batch_size * dp):
        out.append(Problem(path="global_batch_size", value=e.global_batch_size,
                           message=f"not a multiple of micro_batch_size * DP = {e.micro_batch_size * dp}",
                           fix=f"use a multiple of {e.micro_batch_size * dp}"))
    elif e.vpp > 1 and (e.global_batch_size // (e.micro_batch_size * dp)) % e.pp:
        out.append(Problem(path="global_batch_size", value=e.global_batch_size,
                           message="interleaved 1F1B needs micro-batches per step divisible by PP",
                           fix=f"use a multiple of {e.micro_batch_size * dp * e.pp}"))
    if e.seq_length > model.max_position_embeddings and model.position_embedding_type == "learned_absolute":
        out.append(Problem(path="seq_length", value=e.seq_length,
                           message=f"exceeds max_position_embeddings={model.max_position_embeddings}"))
    for key, value in (("num_attention_heads", model.num_attention_heads),
                       ("num_query_groups", model.num_query_groups)):
        if value % e.tp:
            out.append(Problem(path=key, value=value, message=f"not divisible by TP={e.tp}",
                               fix="choose a TP that divides it"))
    if model.num_layers % (e.pp * e.vpp):
        out.append(Problem(path="num_layers", value=model.num_layers,
                           message=f"not divisible by PP*VPP = {e.pp * e.vpp}",
                           fix="the built-in trainer splits layers evenly"))
    if e.recompute_layer_ids:
        out.append(Problem(path="recompute_layer_ids", value=list(e.recompute_layer_ids),
                           message="Primus's per-layer recompute is a Primus patch that stock megatron-core, which the "
                                   "built-in trainer runs, does not have",
                           fix="verify with recompute_method: block and recompute_num_layers instead"))
    if e.lora_rank:
        out.append(Problem(path="lora", value={"enabled": True, "dim": e.lora_rank},
                           message="the built-in trainer trains every weight; LoRA adapters are Primus's peft",
                           fix="verify the fully trained recipe (lora.enabled: false), or run under Primus"))
    if iters < 1 or warmup < 0 or warmup >= iters:
        out.append(Problem(path="train_iters", value=iters,
                           message=f"need iters >= 1 and 0 <= warmup ({warmup}) < iters"))
    return out


def plan_run(model: ModelSpec, execution: ExecutionSpec, *, world_size: int, iters: int, device: str = "cpu",
             warmup: int = 1, cores: int | None = None, seed: int = 1234, time_collectives: bool = False) -> TrainPlan:
    """Check and resolve a run; raises ``RecipeError`` listing every problem."""
    import os

    problems = _problems(model, execution, world_size, iters, warmup, device)
    if problems:
        raise RecipeError(problems=problems, source="built-in trainer", what="cannot run on the")
    dp = world_size // (execution.tp * execution.pp * execution.cp)
    execution = replace(execution, data_parallel_size=dp)
    cores = cores or os.cpu_count() or 1
    return TrainPlan(model=model, execution=execution, world_size=world_size, iters=iters, warmup=warmup,
                     device=device, seed=seed, threads_per_rank=max(1, cores // world_size),
                     time_collectives=time_collectives and device == "cpu")
