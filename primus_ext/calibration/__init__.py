"""Calibration from the user's own runs: real training logs correct the projection on their cluster.

Layer: above ``projection`` (it corrects projections), below ``tune`` and the launcher (which apply it).

    primus-ext calibrate RECIPE train.log [more.log ...] --cluster mi355x --nodes 1   # compare, store a record
    primus-ext project RECIPE --cluster mi355x --nodes 1      # now says "calibrated (exact) from 1 log ..."

``workload``: what a record applies to; ``correction``: the physical correction (kernel factor, step overhead,
memory factor) and its fit; ``arithmetic``: the correction applied to a step's named parts (the one path every
consumer takes); ``record``: the stored record; ``apply``: applying it; ``compare``: one log against its projection.
"""

from primus_ext.calibration.apply import (
    NEARBY_SPREAD,
    apply_record,
    apply_stored,
    calibrated_memory,
    find_record,
)
from primus_ext.calibration.arithmetic import Corrected, correct, corrected_step_floor
from primus_ext.calibration.correction import Correction, CorrectionError, StepParts, fit_correction
from primus_ext.calibration.record import CalibrationRecord, RunFigures, load_records, save_record
from primus_ext.calibration.workload import Workload

__all__ = ["NEARBY_SPREAD", "CalibrationRecord", "Corrected", "Correction", "CorrectionError", "RunFigures",
           "StepParts", "Workload", "apply_record", "apply_stored", "calibrated_memory", "correct",
           "corrected_step_floor", "find_record", "fit_correction", "load_records", "save_record"]
