"""Recipe keys -> Megatron-LM flags (``primus_ext.launcher.megatron_cli``), against the committed ``flags.json``.

    python -m pytest -q tests/launcher/megatron_cli/test_argv.py

The committed table itself is checked against the releases in test_upstream.py (when a Megatron-LM clone is at
hand); here, the mapping's rules and the verify-top launch plans.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from verify_cases import verify_manifests

from primus_ext.launcher.megatron_cli import SUPPORTED_TAGS, dropped_lines, flag_table, megatron_argv


def test_the_table_is_of_the_supported_releases():
    table = flag_table()
    assert table.tags == SUPPORTED_TAGS
    assert table.options["fp8"][0].flags == ("--fp8-format",) and set(table.options["fp8"][0].choices) == {
        "e4m3", "hybrid"}
    assert set(table.options["recompute_granularity"][0].choices) == {"full", "selective"}
    assert "enable_zero_bubble" not in table.options and "fp8" not in {f[2:] for o in table.options.values()
                                                                         for opt in o for f in opt.flags}


def test_keys_become_the_flags_of_their_dest():
    built = megatron_argv({
        "fp8": "hybrid", "sequence_parallel": 1, "masked_softmax_fusion": False, "tensor_model_parallel_size": 2,
        "recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1,
        "enable_zero_bubble": True, "use_turbo_attention": True, "init_method_std": {"enable": False},
        "recompute_modules": ["core_attn", "mlp"], "lr": 1.0e-5, "save": None, "bf16": False})
    assert built.argv == ("--fp8-format", "hybrid", "--sequence-parallel", "--no-masked-softmax-fusion",
                          "--tensor-model-parallel-size", "2", "--recompute-granularity", "full",
                          "--recompute-method", "uniform", "--recompute-num-layers", "1", "--lr", "1e-05")
    dropped = {d.key: d.reason for d in built.dropped}
    assert set(dropped) == {"enable_zero_bubble", "use_turbo_attention", "init_method_std", "recompute_modules"}
    assert "Primus" in dropped["enable_zero_bubble"] and "mapping" in dropped["init_method_std"]
    assert "some supported releases" in dropped["recompute_modules"]  # a list in 0.14+, one value in 0.13


@pytest.mark.parametrize(("key", "value", "word"), [
    ("recompute_granularity", "sel", "choices"), ("fp8", "e5m2", "choices"), ("fp8", True, "boolean"),
    ("tensor_model_parallel_size", [1, 2], "one value"), ("sequence_parallel", "yes", "on or off"),
])
def test_values_the_parser_refuses_are_dropped(key, value, word):
    built = megatron_argv({key: value})
    assert built.argv == () and len(built.dropped) == 1 and word in built.dropped[0].reason


def test_defaults_are_left_out_and_primus_switches_drop_what_they_turn_off():
    assert megatron_argv({"init_method_std": 0.02, "add_bias_linear": True, "retro_add_retriever": False}).argv == ()
    built = megatron_argv({"disable_wandb": True, "wandb_project": "p"})
    assert built.argv == () and {d.key for d in built.dropped} == {"disable_wandb", "wandb_project"}
    assert megatron_argv({"disable_wandb": False, "wandb_project": "p"}).argv == ("--wandb-project", "p")
    lines = dropped_lines(built.dropped, width=60)
    assert any("wandb_project" in line for line in lines) and all(len(line) <= 60 for line in lines)


def _flags(command: str) -> list[str]:
    return [w for w in shlex.split(command.split(" 2>&1 ")[0]) if w.startswith("--")]


def test_verify_top_megatron_commands_use_only_flags_every_release_has(tmp_path: Path):
    known = {f for options in flag_table().options.values() for o in options for f in o.flags}
    torchrun = {"--nproc-per-node", "--nnodes", "--node-rank", "--master-addr", "--master-port"}
    ran = refused = 0
    for name, manifest in verify_manifests(tmp_path).items():
        for entry in manifest["candidates"]:
            command = entry["launch"]["megatron"]
            if command is None:  # a zero-bubble / V schedule: Primus's alone
                refused += 1
                assert "runs only under Primus" in entry["launch"]["megatron_plan"]["refused"], name
                continue
            ran += 1
            unknown = [f for f in _flags(command) if f.split("=")[0] not in known | torchrun]
            assert unknown == [], (name, entry["name"], unknown)
            assert "--tokenizer-type NullTokenizer" in command and "--fp8 " not in command
            assert ("--fp8-format hybrid" in command) == name.startswith(("llama8b", "mixtral"))  # FP8 recipes
    assert ran == 9 and refused == 2


def test_a_newline_in_a_dropped_key_cannot_end_launch_sh_comment(tmp_path: Path):
    from primus_ext.launcher.verify_top.variants import _megatron_comment

    plan = {"tokenizer": {"tokenizer_model": "a\nrm -rf /"}, "refused": None,
            "dropped": [{"key": "x\ntouch pwned", "value": 1, "reason": "not an argument"}]}
    lines = _megatron_comment([{"name": "candidate-1", "launch": {"megatron_plan": plan}}])
    assert all(line.startswith("# ") and "\n" not in line for line in lines)
