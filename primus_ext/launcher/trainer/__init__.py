"""The built-in megatron-core trainer: a small GPT, mock data, N real steps on local ranks.

It verifies projections on short real runs (``primus-ext train --train-iters N --verify``) and is
what the end-to-end CPU check uses::

    from primus_ext.launcher.trainer import run_training, tiny_model
    result = run_training(tiny_model(), execution, world_size=2, iters=5, device="cpu")
    result.median_step_time_s, result.spread, result.losses

What runs on CPU (gloo, megatron-core 0.16.1, seen working): DP (megatron DDP), TP with and without
sequence parallelism, EP (allgather dispatcher), full recompute, and PP through megatron's
own schedules - ``forward_backward_pipelining_without_interleaving`` (1F1B) and, with VPP, the
interleaved schedule. Two training-only workarounds make PP run on gloo: ``batch_p2p_comm=False``
(the batched isend/irecv path calls ``torch.cuda.synchronize()``) and ``cpu_schedules.py`` (the
schedules allocate their token counter on a literal ``"cuda"`` device). Not on CPU: tied embeddings
under PP>1 (megatron syncs them with ``.cuda()``; refused with the fix), context parallelism and MLA
(refused: launch those through Primus / Megatron-LM), megatron's optimizers (they allocate on CUDA;
``build.LocalAdam`` stands in). On a GPU the same code uses NCCL, the TE spec when transformer-engine
imports, and megatron's optimizer.
"""

from primus_ext.launcher.trainer.plan import TrainPlan, plan_run, tiny_model
from primus_ext.launcher.trainer.run import TrainingFailed, TrainResult, run_plan, run_training

__all__ = ["TrainPlan", "TrainResult", "TrainingFailed", "plan_run", "run_plan", "run_training", "tiny_model"]
