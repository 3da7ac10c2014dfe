"""The built-in megatron-core trainer: a small GPT, mock data, N real steps on local ranks.

It verifies projections on short real runs (``primus-ext train --train-iters N --verify``) and is
what the end-to-end CPU check uses::

    from primus_ext.launcher.trainer import run_training, tiny_model
    result = run_training(tiny_model(), execution, world_size=2, iters=5, device="cpu")
"""

from primus_ext.launcher.trainer.plan import TrainPlan, plan_run, tiny_model
from primus_ext.launcher.trainer.run import TrainingFailed, TrainResult, run_plan, run_training

__all__ = ["TrainPlan", "TrainResult", "TrainingFailed", "plan_run", "run_plan", "run_training", "tiny_model"]
