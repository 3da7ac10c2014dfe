"""Read real training logs as they are: Megatron-LM, Primus, Megatron-Bridge and NeMo 2.

    from primus_ext.logs import read_log
    log = read_log("train.log")
    log.stats.median_s, log.stats.spread, log.peak_reserved_bytes, log.flags
    log.run.precision, log.run.seq_length, log.run.world_size    # the configuration dump, typed (logs.dump)

Formats, rules (warm-up, spikes, dedupe, restarts) and what is flagged: docs/logs.md.
Bottom layer: imports only ``primus_ext.errors`` and ``primus_ext.hardware`` (for the largest dense peak).
"""

from primus_ext.logs.read import read_log
from primus_ext.logs.records import Iteration, LogError, LogFlag, MemoryReport, RunConfig, StepStats, TrainingLog

__all__ = ["Iteration", "LogError", "LogFlag", "MemoryReport", "RunConfig", "StepStats", "TrainingLog", "read_log"]
