"""Analytic parts: per-rank shapes, layer costs, flops, memory, collectives, pipeline schedules."""
