# Test fixture: Megatron-LM pretrain_gpt.py, core_v0.18.0 .. core_v0.19.0 and main (2026).

"""Pretrain and SFT GPT."""

# Reproduces only the structure of the lines patches/megatron-lm-pretrain_gpt.core_v0.18-main.patch
# touches: the module docstring on line 3 with a blank line after it (the import hunk), and the
# `args = parse_and_validate_args(...)` call of the `__main__` block with `extra_args_provider=` as its
# first argument, followed by `args_defaults=` (the call hunk); then, as upstream, a config container
# built from the arguments goes to `pretrain(full_config, ...)`. `megatron.training` is the stand-in
# next to this folder.
from megatron.training import inprocess_restart, pretrain
from megatron.training.arguments import parse_and_validate_args, pretrain_cfg_container_from_args

has_nvidia_modelopt = False
add_modelopt_args = None


class ModelType:
    encoder_or_decoder = "encoder_or_decoder"


def forward_step(data_iterator, model):
    return None


def train_valid_test_datasets_provider(train_val_test_num_samples):
    return None, None, None


if __name__ == "__main__":
    pretrain, store = inprocess_restart.maybe_wrap_for_inprocess_restart(pretrain)

    args = parse_and_validate_args(
        extra_args_provider=add_modelopt_args if has_nvidia_modelopt else None,
        args_defaults={'tokenizer_type': 'GPT2BPETokenizer'},
    )
    full_config = pretrain_cfg_container_from_args(args)
    pretrain(
        full_config,
        train_valid_test_datasets_provider,
        ModelType.encoder_or_decoder,
        forward_step,
        store=store,
    )
