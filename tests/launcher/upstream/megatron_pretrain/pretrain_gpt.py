# Test fixture: Megatron-LM pretrain_gpt.py, core_v0.13.0 .. core_v0.17.1 and Primus's pin d3528a2.

"""Pretrain and SFT GPT."""

# Reproduces only the structure of the lines patches/megatron-lm-pretrain_gpt.core_v0.13-v0.17.patch
# touches: the module docstring on line 3 with a blank line after it (the import hunk), and the
# `pretrain(...)` call of the `__main__` block with `extra_args_provider=` between `args_defaults=`
# and `store=` (the call hunk), preceded, as upstream, by `maybe_wrap_for_inprocess_restart`, which
# parses the command line once more. `megatron.training` is the stand-in next to this folder.
from megatron.training import inprocess_restart, pretrain

has_nvidia_modelopt = False
add_modelopt_args = None


class ModelType:
    encoder_or_decoder = "encoder_or_decoder"


def model_provider(pre_process=True, post_process=True):
    return None


def forward_step(data_iterator, model):
    return None


def train_valid_test_datasets_provider(train_val_test_num_samples):
    return None, None, None


if __name__ == "__main__":
    pretrain, store = inprocess_restart.maybe_wrap_for_inprocess_restart(pretrain)

    pretrain(
        train_valid_test_datasets_provider,
        model_provider,
        ModelType.encoder_or_decoder,
        forward_step,
        args_defaults={'tokenizer_type': 'GPT2BPETokenizer'},
        extra_args_provider=add_modelopt_args if has_nvidia_modelopt else None,
        store=store,
    )
