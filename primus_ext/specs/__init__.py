"""Typed, frozen specs: the three inputs kept apart (model / execution / system)."""

from primus_ext.specs.execution import ExecutionSpec
from primus_ext.specs.launch import LaunchSpec
from primus_ext.specs.model import ModelSpec
from primus_ext.specs.system import Capabilities, Efficiency, GPUSpec, SystemSpec

__all__ = ["Capabilities", "Efficiency", "ExecutionSpec", "GPUSpec", "LaunchSpec", "ModelSpec", "SystemSpec"]
