"""Small architectures and a one-rank megatron world shared by the measurement tests."""

from __future__ import annotations

import archs
import pytest

GQA, MOE, MLA = archs.GQA, archs.MOE, archs.MLA


@pytest.fixture(scope="module")
def world1():
    """torch.distributed + megatron parallel_state for one CPU rank (torn down after the module)."""
    from primus_ext.measure.shims import parallel_context

    with parallel_context(device="cpu") as dev:
        yield dev
