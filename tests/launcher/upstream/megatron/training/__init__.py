"""Stand-in for Megatron-LM's ``megatron.training`` package (tests/launcher/test_patches.py only).

What ``pretrain_gpt.py`` imports from it, in the order the real package does the work (Megatron-LM
core_v0.13 .. main, ``megatron/training/training.py`` and ``initialize.py``): ``pretrain`` asserts
CUDA first, then - core_v0.13 .. v0.17 - parses the arguments inside ``initialize_megatron`` (from
core_v0.18 on the caller parsed them with ``parse_and_validate_args`` and passes a config container),
then initialises torch.distributed, then trains. Each step prints one ``megatron:`` line (no GPU is
needed: the CUDA check is only printed), so a test sees how far a launch got.
"""

from megatron.training import inprocess_restart
from megatron.training.arguments import ConfigContainer, parse_args

__all__ = ["inprocess_restart", "pretrain"]


def pretrain(first, *positional, extra_args_provider=None, args_defaults=None, store=None, **options):
    """``pretrain(train_valid_test_datasets_provider, model_provider, model_type, forward_step, ...)``
    (core_v0.13 .. v0.17) or ``pretrain(full_config, train_valid_test_datasets_provider, ...)`` (v0.18+)."""
    print("megatron: check CUDA")
    if isinstance(first, ConfigContainer):
        args = first.args
    else:
        args = parse_args(extra_args_provider)
        for key, value in (args_defaults or {}).items():
            if getattr(args, key, None) is None:
                setattr(args, key, value)
    print("megatron: initialise torch.distributed")
    print(f"megatron: train {args.num_layers} layers, hidden {args.hidden_size}")
