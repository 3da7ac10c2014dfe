"""A stand-in for Megatron-LM's ``pretrain`` with its calling convention (tests only).

``pretrain(train_valid_test_datasets_provider, model_provider, model_type, forward_step_func,
extra_args_provider=None, args_defaults=None, argv=None)``: build Megatron's argparse parser (a subset
of its arguments with Megatron's names, dests and defaults), let ``extra_args_provider`` extend it,
parse, then "initialise distributed" and "train" (recorded in ``EVENTS``).
"""

from __future__ import annotations

import argparse

EVENTS: list[str] = []


def _megatron_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Megatron-LM Arguments", allow_abbrev=False)
    g = p.add_argument_group("network size")
    g.add_argument("--num-layers", type=int, default=None)
    g.add_argument("--hidden-size", type=int, default=None)
    g.add_argument("--ffn-hidden-size", type=int, default=None)
    g.add_argument("--num-attention-heads", type=int, default=None)
    g.add_argument("--group-query-attention", action="store_true")
    g.add_argument("--num-query-groups", type=int, default=1)
    g.add_argument("--kv-channels", type=int, default=None)
    g.add_argument("--max-position-embeddings", type=int, default=None)
    g.add_argument("--position-embedding-type", default="learned_absolute")
    g.add_argument("--normalization", default="LayerNorm")
    g.add_argument("--swiglu", action="store_true")
    g.add_argument("--disable-bias-linear", action="store_false", dest="add_bias_linear")
    g.add_argument("--untie-embeddings-and-output-weights", action="store_true")
    g.add_argument("--vocab-size", type=int, default=None)
    g.add_argument("--make-vocab-size-divisible-by", type=int, default=128)
    g = p.add_argument_group("training")
    g.add_argument("--micro-batch-size", type=int, default=None)
    g.add_argument("--global-batch-size", type=int, default=None)
    g.add_argument("--seq-length", type=int, default=None)
    g.add_argument("--train-iters", type=int, default=None)
    g.add_argument("--bf16", action="store_true")
    g.add_argument("--use-distributed-optimizer", action="store_true")
    g.add_argument("--recompute-granularity", default=None)
    g.add_argument("--save", default=None)
    g = p.add_argument_group("distributed")
    g.add_argument("--tensor-model-parallel-size", type=int, default=1)
    g.add_argument("--pipeline-model-parallel-size", type=int, default=1)
    g.add_argument("--context-parallel-size", type=int, default=1)
    g.add_argument("--sequence-parallel", action="store_true")
    return p


def parse_args(extra_args_provider=None, argv=None):
    """megatron.training.arguments.parse_args: provider first, then one parse_args call."""
    parser = _megatron_parser()
    if extra_args_provider is not None:
        parser = extra_args_provider(parser)
    return parser.parse_args(argv)


def pretrain(train_valid_test_datasets_provider, model_provider, model_type, forward_step_func,
             extra_args_provider=None, args_defaults=None, argv=None, **_kwargs):
    args = parse_args(extra_args_provider, argv)
    for key, value in (args_defaults or {}).items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    EVENTS.append("initialize_distributed")
    model_provider(args)
    EVENTS.append("train")
    print("standin pretrain: trained")
    return args
