"""The result schema's version and the kinds of document it knows (``primus_ext.results`` re-exports both)."""

SCHEMA_VERSION = 2
"""Raised when a field is renamed, removed or changes its unit (added fields keep the version). 2 (2026-12-07, issue
55): a ``tune`` document's configurations (``config``) and sensitivity axes name the recipe's fields
(``micro_batch_size``, not ``mbs``; ``tune.axes``); nothing else changed."""

KINDS = ("projection", "memory", "tune", "ci", "baseline", "verify", "validation", "calibration", "comparison",
         "sweep")
"""What a document is: ``project``, ``project --memory-only``, ``tune``, ``ci``, the ``ci`` baseline file,
``train --verify`` (verify.json), ``validate`` (with ``--calibrate-from``: its ``calibrated_from_user_run``),
``calibrate`` (runs from training logs against their projections, and the stored record), ``compare``,
``project --nodes 1,2,4,8`` (a scaling sweep: one entry per node count)."""

__all__ = ["KINDS", "SCHEMA_VERSION"]
