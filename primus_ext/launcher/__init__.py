"""Where users meet the tool: the command they already use to start training.

- ``hook``: ``--projection-only`` for Megatron-LM's ``pretrain(extra_args_provider=...)`` and Primus's
  ``train`` subcommand (patches in ``patches/``).
- ``projection_only``: measure what is missing, project, write projection.json/.html/.png, exit code.
- ``delegate``: launch real training through Primus or Megatron-LM when installed.
- ``trainer``: the built-in megatron-core trainer for short real runs (``run_training``).
"""
