# Copyright (c) 2023, NVIDIA CORPORATION.  All rights reserved.
"""Pretrain and SFT GPT."""

# Test fixture: the shape of Megatron-LM's pretrain_gpt.py around its `pretrain(...)` call
# (core_r0.13 .. core_r0.16), reduced to what tests/launcher/test_patches.py needs; `pretrain`
# comes from the stand-in with Megatron's calling convention.
from functools import partial

from standin_megatron import pretrain

has_nvidia_modelopt = False
add_modelopt_args = None
gpt_builder = None
store = None


class ModelType:
    encoder_or_decoder = "encoder_or_decoder"


def model_provider(builder, args):
    return None


def forward_step(data_iterator, model):
    return None


def train_valid_test_datasets_provider(train_val_test_num_samples):
    return None, None, None


if __name__ == "__main__":

    # Temporary for transition to core datasets
    train_valid_test_datasets_provider.is_distributed = True

    pretrain(
        train_valid_test_datasets_provider,
        partial(model_provider, gpt_builder),
        ModelType.encoder_or_decoder,
        forward_step,
        args_defaults={'tokenizer_type': 'GPT2BPETokenizer'},
        extra_args_provider=add_modelopt_args if has_nvidia_modelopt else None,
        store=store,
    )
