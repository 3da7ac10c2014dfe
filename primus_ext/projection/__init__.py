"""Projection: per-rank layer costs + collectives + pipeline schedule -> one ``Projection`` per config.

    from primus_ext.projection import evaluate, project
    fast = evaluate(model, execution, system, costs)     # tuner: pure arithmetic, memoised lookups
    full = project(model, execution, system, costs)      # CLI: + timeline, memory, uncertainty band
"""

from primus_ext.projection.evaluate import evaluate
from primus_ext.projection.project import project
from primus_ext.projection.result import Breakdown, CommTime, Projection, StageTime

__all__ = ["Breakdown", "CommTime", "Projection", "StageTime", "evaluate", "project"]
