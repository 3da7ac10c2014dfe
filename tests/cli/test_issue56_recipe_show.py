"""Issue 56, part 7: ``recipe show`` of a recipe with no target GPU lists every problem at once, the missing target
among them (it named only ``--cluster``, hiding a typo and the layout's rules that hold on any GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from primus_ext.cli import main

RECIPE = ("tensor_model_parallel_size: 3\npipeline_model_parallel_size: 1\nnum_layers: 4\nhidden_size: 1024\n"
          "ffn_hidden_size: 4096\nnum_attention_heads: 16\nvocab_size: 32000\nseq_length: 2048\nmicro_batch_size: 1\n"
          "global_batch_size: 64\ntensor_parallel_sise: 2\n")


def test_no_target_is_one_problem_among_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("PRIMUS_EXT_CLUSTER", raising=False)
    monkeypatch.setattr("primus_ext.hardware.visible.visible_gpus", lambda: ())  # no GPU here names one
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE)
    assert main(["recipe", "show", str(recipe)]) == 2
    err = capsys.readouterr().err
    assert "--cluster: no target GPU" in err
    assert "tensor_parallel_sise: unknown key" in err and "did you mean tensor_model_parallel_size" in err
    assert "num_attention_heads: not divisible by TP=3" in err and "ffn_hidden_size: not divisible by TP=3" in err
    assert "world size" not in err  # a GPU count's rule: not the recipe's without a target
