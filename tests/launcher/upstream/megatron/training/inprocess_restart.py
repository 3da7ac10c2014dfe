"""Stand-in for Megatron-LM's ``megatron/training/inprocess_restart.py`` (tests/launcher/test_patches.py only).

Like the real one (core_v0.13 .. main), ``maybe_wrap_for_inprocess_restart`` parses the command line
once more, ignoring arguments it does not know (the ``--projection-*`` ones among them), before
``pretrain_gpt.py`` calls ``pretrain`` / ``parse_and_validate_args``; without in-process restart it
returns ``pretrain`` unchanged and no store.
"""

from megatron.training.arguments import parse_args


def maybe_wrap_for_inprocess_restart(pretrain):
    parse_args(ignore_unknown_args=True)
    return pretrain, None
