"""A GPU run below its rated board power: lower sustained clocks, lower tensor-core peak.

    >>> from primus_ext.hardware.power import power_capped
    >>> h100_500w = power_capped(load_gpu("h100"), 500.0)     # e.g. Meta's Grand Teton H100 @ 500 W
    >>> h100_500w.bf16_dense_tflops                          # 989 * (500/700)**(1/3) = 884

Dynamic CMOS power is ``P = C V^2 f`` and, across the DVFS range, the supply voltage scales roughly
with the frequency, so ``P ~ f^3`` and a board capped at ``P_cap`` sustains ``f ~ (P_cap/P_tdp)^(1/3)``
of its clock under full load (Kaxiras & Martonosi, "Computer Architecture Techniques for
Power-Efficiency", 2008, ch. 1: dynamic power and voltage-frequency scaling). Both boards throttle
under dense tensor-core load, so the ratio of the two limits is what sets the clock ratio. Tensor-core
peaks scale with the SM clock; HBM bandwidth has its own clock and is kept; the scale-up / scale-out
links are unaffected. Pure.
"""

from __future__ import annotations

from dataclasses import replace

from primus_ext.specs import GPUSpec

POWER_CLOCK_EXPONENT = 1.0 / 3.0
"""f ~ P^(1/3): dynamic power C V^2 f with V ~ f (see the module docstring)."""


def clock_scale(power_w: float, tdp_w: float) -> float:
    """Sustained SM-clock ratio of a board capped at ``power_w`` against its rated ``tdp_w`` (<= 1)."""
    if power_w <= 0 or tdp_w <= 0 or power_w >= tdp_w:
        return 1.0
    return (power_w / tdp_w) ** POWER_CLOCK_EXPONENT


def power_capped(gpu: GPUSpec, power_w: float) -> GPUSpec:
    """``gpu`` run at ``power_w`` board power: dense peaks scaled by ``clock_scale``; unchanged when
    the cap is at or above the profile's rated power (or either is unknown)."""
    scale = clock_scale(power_w, gpu.tdp_w)
    if scale >= 1.0:
        return gpu
    return replace(gpu, bf16_dense_tflops=gpu.bf16_dense_tflops * scale,
                   fp8_dense_tflops=gpu.fp8_dense_tflops * scale, fp4_dense_tflops=gpu.fp4_dense_tflops * scale,
                   sfu_exp_per_s=gpu.sfu_exp_per_s * scale, tdp_w=power_w,
                   sources=f"{gpu.sources}; capped at {power_w:g} W: peaks x{scale:.3f} (f ~ P^(1/3))")


__all__ = ["POWER_CLOCK_EXPONENT", "clock_scale", "power_capped"]
