"""Issue 56, part 4: thousands of unknown recipe keys cost the loader linear time (30 000 took 38-130 CPU-s: a typo
search of ~15 ms each, twice); the first ``MAX_PROBLEMS`` are named and checked for typos, the rest counted."""

from __future__ import annotations

import time
from pathlib import Path

from primus_ext.errors import MAX_PROBLEMS
from primus_ext.recipe.loader import load_recipe

TINY = ("tensor_model_parallel_size: 1\npipeline_model_parallel_size: 1\nnum_layers: 4\nhidden_size: 1024\n"
        "ffn_hidden_size: 4096\nnum_attention_heads: 16\nvocab_size: 32000\nseq_length: 2048\nmicro_batch_size: 1\n"
        "global_batch_size: 64\n")


def test_thousands_of_unknown_keys_are_counted_not_searched_one_by_one(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(TINY + "tensor_parallel_sise: 2\n" + "".join(f"zz_key_{i}: {i}\n" for i in range(5000)))
    start = time.process_time()
    loaded = load_recipe(recipe, cluster="h100", validate=False)
    assert time.process_time() - start < 5.0  # 10 CPU-s before
    unknown = [w for w in loaded.warnings if "unknown key" in w]
    assert len(unknown) == MAX_PROBLEMS + 1
    assert "did you mean `tensor_model_parallel_size`" in unknown[0]
    assert "4,951 more unknown keys, the first `zz_key_49`" in unknown[-1]
