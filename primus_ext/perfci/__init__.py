"""Performance CI for framework maintainers: projected throughput / memory vs a committed baseline.

    primus-ext ci ci/suite.yaml --baseline ci/baseline.json --junit perf.xml --markdown perf.md

A suite lists recipes x clusters (x node counts) with tolerances; each entry is projected (from a
committed timing store when the suite names one, analytic otherwise - labelled) and compared with the
baseline: a drop beyond tolerance fails (exit 1), an improvement passes and is reported, a malformed
suite or a missing baseline entry is an error (exit 2). Entries may also carry a measured throughput
(a short real run, a published row) to catch projection drift.
"""

from primus_ext.perfci.runner import EntryResult, SuiteResult, run_suite
from primus_ext.perfci.suite import Entry, Suite, Tolerance, load_suite

__all__ = ["Entry", "EntryResult", "Suite", "SuiteResult", "Tolerance", "load_suite", "run_suite"]
