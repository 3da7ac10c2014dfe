"""Fixtures shared by the layer-kind tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def one_rank_world():
    """A one-rank torch.distributed + megatron parallel state on CPU, for building a kind's real module."""
    pytest.importorskip("torch")
    pytest.importorskip("megatron.core")
    from primus_ext.measure.shims import parallel_context

    with parallel_context(device="cpu"):
        yield
