"""The search never crashes: random pins and node counts through every strategy end in a result or exit 2.

Reproducers of the crashes users met (issue 36): an axis that a pin or the global batch leaves without a
candidate (``min() arg is an empty sequence`` in the exhaustive search's memory-minimal completion and in
``Space.repair``, ``KeyError`` when an empty domain was popped, ``IndexError`` in ``Space.axes``).
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from primus_ext.cli import main
from primus_ext.tune.axes import CP, EP, MBS, PP, TP, VPP

SMALL_MOE = {
    "num_layers": 8, "hidden_size": 1024, "ffn_hidden_size": 4096, "num_attention_heads": 16,
    "group_query_attention": True, "num_query_groups": 4, "vocab_size": 32000, "seq_length": 4096,
    "micro_batch_size": 1, "global_batch_size": 64, "bf16": True, "swiglu": True, "normalization": "RMSNorm",
    "position_embedding_type": "rope", "add_bias_linear": False, "num_experts": 8, "moe_router_topk": 2,
    "moe_ffn_hidden_size": 1024, "moe_grouped_gemm": True, "moe_token_dispatcher_type": "alltoall",
    "expert_model_parallel_size": 2, "use_distributed_optimizer": True,
}
AXIS_VALUES = {TP: [1, 2, 3, 4, 8], PP: [1, 2, 4, 7, 8], EP: [1, 2, 3, 4, 8], CP: [1, 2], MBS: [1, 2, 3, 64],
               VPP: [1, 2, 4]}


@pytest.fixture(scope="module")
def recipe(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("search") / "small_moe.yaml"
    path.write_text(yaml.safe_dump(SMALL_MOE))
    return path


def _tune(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(argv)
    return code, out.getvalue()


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(strategy=st.sampled_from(["exhaustive", "tpe"]), nodes=st.sampled_from([1, 2, 3, 16, 512]),
       pins=st.dictionaries(st.sampled_from(sorted(AXIS_VALUES)), st.integers(0, 4), max_size=3))
def test_random_pins_and_node_counts_never_crash(recipe, strategy, nodes, pins):
    pytest.importorskip("optuna")
    argv = ["tune", str(recipe), "--cluster", "h100", "--nodes", str(nodes), "--strategy", strategy,
            "--budget", "20", "--no-regret", "--analytic"]
    for axis, index in pins.items():
        values = AXIS_VALUES[axis]
        argv += ["--pin", f"{axis}={values[index % len(values)]}"]
    code, text = _tune(argv)  # an uncaught exception fails the test with its traceback
    assert code in (0, 2), text
    assert "Traceback" not in text


@pytest.mark.parametrize("strategy", ["exhaustive", "tpe"])
def test_a_pin_that_empties_an_axis_for_some_layouts_still_searches(recipe, strategy):
    """DeepSeek-V2-Lite's --pin ep=4 / --pin pp=2 reproducers: some structural prefixes keep no micro-batch
    size (the global batch is not divisible by MBS x DP there); the search skips them."""
    pytest.importorskip("optuna")
    for pin in ("ep=4", "pp=2", "mbs=64"):
        code, text = _tune(["tune", str(recipe), "--cluster", "h100", "--nodes", "1", "--strategy", strategy,
                            "--budget", "20", "--pin", pin, "--no-regret", "--analytic"])
        assert code in (0, 2) and "Traceback" not in text, (pin, text)


@pytest.mark.slow
@pytest.mark.parametrize("nodes", [512, 1024])
def test_deepseek_v3_exhaustive_at_the_scale_it_was_trained(nodes):
    """Issue 36: the shipped DeepSeek-V3 recipe's exhaustive search at 4 096 / 8 192 H100s ended in
    ``ValueError: min() arg is an empty sequence``; it must finish with a tuned configuration."""
    recipe = Path(__file__).resolve().parents[2] / "recipes" / "deepseek_v3-pretrain.yaml"
    code, text = _tune(["tune", str(recipe), "--cluster", "h100", "--nodes", str(nodes), "--strategy",
                        "exhaustive", "--no-regret", "--analytic"])
    assert code == 0 and "best:" in text and "Traceback" not in text, text


@pytest.mark.parametrize("strategy", ["exhaustive", "tpe"])
def test_a_space_where_nothing_fits_exits_2_and_says_why(tmp_path, strategy):
    """Llama-3.1-405B on 4 nodes ended with exit 0, 'no configuration was projected' and no file."""
    pytest.importorskip("optuna")
    big = {**SMALL_MOE, "num_layers": 126, "hidden_size": 16384, "ffn_hidden_size": 53248,
           "num_attention_heads": 128, "num_query_groups": 8, "global_batch_size": 512}
    for key in ("num_experts", "moe_router_topk", "moe_ffn_hidden_size", "expert_model_parallel_size"):
        big.pop(key)
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(big))
    out = tmp_path / "tuned.yaml"
    code, text = _tune(["tune", str(path), "--cluster", "h100", "--nodes", "1", "--strategy", strategy,
                        "--budget", "20", "--no-regret", "--analytic", "--out", str(out)])
    assert code == 2 and "no configuration of the search space" in text and "Traceback" not in text, text
    assert not out.exists()
