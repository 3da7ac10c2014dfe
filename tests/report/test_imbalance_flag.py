"""The imbalance flag in the terminal table and the HTML page: shown for an output-heavy last stage, absent when
the stages are equal."""

from __future__ import annotations

import dataclasses

import pytest

from primus_ext.hardware import load_system
from primus_ext.projection import project
from primus_ext.report.html import render_html
from primus_ext.report.projection_table import format_projection
from primus_ext.specs import ExecutionSpec, ModelSpec

MODEL = ModelSpec(name="dense", num_layers=16, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32,
                  num_query_groups=8, kv_channels=128, vocab_size=128256)
EXECUTION = ExecutionSpec(tensor_model_parallel_size=1, pipeline_model_parallel_size=4, data_parallel_size=2,
                          micro_batch_size=1, global_batch_size=64, seq_length=4096, precision="bf16")


@pytest.fixture(scope="module", params=["imbalanced", "balanced"])
def case(request):
    vocab = 128256 if request.param == "imbalanced" else 1024
    p = project(dataclasses.replace(MODEL, vocab_size=vocab), EXECUTION, load_system("h100", 1), None)
    return request.param, p


def test_terminal_table_flags_imbalanced_stages_only(case):
    kind, p = case
    flagged = [line for line in format_projection(p).splitlines() if line.startswith("pipeline stages imbalanced")]
    if kind == "imbalanced":
        assert len(flagged) == 1 and "stage 3 busiest" in flagged[0]
        assert "decoder_last_pipeline_num_layers" in flagged[0]
    else:
        assert flagged == []


def test_html_flags_imbalanced_stages_only(case):
    kind, p = case
    page = render_html(p)
    assert ('class="warn"' in page and "pipeline stages imbalanced" in page) == (kind == "imbalanced")
    assert "Idle time per pipeline stage" in page
