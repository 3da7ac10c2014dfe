"""What is timed is what is trained: the built-in trainer (``train --verify``, ``tune --verify-run local``) builds
its GPT from measurement's config and layer spec (``measure.build.config_kwargs``, ``kind_builders.decoder_layer_spec``)
for the layer the projection priced, and only the run's own fields (``RUN_FIELDS``) differ.

The case that forked before: an alternating sliding-window model (GPT-OSS: ``window_attn_skip_freq`` 2, every
second layer attends fully). Measurement times one period of the pattern; the trainer used to leave the key out and
train every layer windowed.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from primus_ext.launcher.trainer import plan_run, tiny_model
from primus_ext.launcher.trainer.build import RUN_FIELDS, build_model_chunks, decoder_shape, transformer_config
from primus_ext.measure.build import build_layer
from primus_ext.measure.build import transformer_config as timed_config
from primus_ext.specs import ExecutionSpec

WINDOWED = dict(num_layers=4, window_size=(8, 0), window_attn_skip_freq=2)
"""GPT-OSS's pattern at CPU size: layers 1 and 3 attend within an 8-token window, 2 and 4 to the whole sequence."""


def _plan(**model):
    execution = ExecutionSpec(seq_length=32, micro_batch_size=1, global_batch_size=1, precision="fp32")
    return plan_run(tiny_model(**model), execution, world_size=1, iters=3, device="cpu")


@pytest.fixture(scope="module")
def world1():
    from primus_ext.measure.shims import apply_cpu_shims, parallel_context

    apply_cpu_shims("cpu")
    with parallel_context(device="cpu") as dev:
        yield dev


def _windows(module: torch.nn.Module) -> list[object]:
    """Each transformer layer's attention window as megatron built it (None: full attention)."""
    return [layer.self_attention.core_attention.scale_mask_softmax.window_size
            for layer in module.modules() if type(layer).__name__ == "TransformerLayer"]


def test_the_trainer_config_is_the_timed_layer_config_plus_the_run():
    plan = _plan(**WINDOWED)
    trained = transformer_config(plan, cpu=True, use_te=False)
    timed, _ = timed_config(decoder_shape(plan), distributed=True, device=torch.device("cpu"), use_te=False)
    assert trained.window_attn_skip_freq == 2 and trained.window_size == (8, 0)
    # every field but the run's; the init methods are partials megatron derives from the depth (not comparable)
    differ = {f.name for f in dataclasses.fields(trained) if f.name not in RUN_FIELDS
              and not f.name.endswith("init_method") and getattr(trained, f.name) != getattr(timed, f.name)}
    assert not differ, {n: (getattr(trained, n), getattr(timed, n)) for n in differ}
    assert trained.num_layers == 4 and timed.num_layers == 2  # the trainer stacks the model; bench times a period


def test_train_verify_builds_the_alternating_window_model_that_was_timed(world1):
    plan = _plan(**WINDOWED)
    config = transformer_config(plan, cpu=True, use_te=False)
    torch.manual_seed(0)
    (chunk,) = build_model_chunks(plan, config, use_te=False, device=world1)
    trained = _windows(chunk)
    timed = _windows(build_layer(decoder_shape(plan), device="cpu", distributed=True).module)
    assert timed == [(8, 0), None]  # one period: windowed, then full
    assert trained == timed * 2  # the whole model repeats the timed period; before, every layer was windowed
    full = _windows(build_model_chunks(_plan(num_layers=4), transformer_config(_plan(num_layers=4), cpu=True,
                                                                               use_te=False),
                                       use_te=False, device=world1)[0])
    assert full == [None] * 4  # no window stated: no layer windowed
