"""Accuracy against published runs: read measured rows, project them, report the error.

    primus-ext validate ../shared/validation/measured_throughput.csv \
        --archs ../shared/validation/model_archs.csv --json validation.json
"""
