"""Megatron's precision-aware optimizer arguments -> the ``ExecutionSpec`` optimizer fields.

megatron-core 0.16.1 ``OptimizerConfig.__post_init__``: the four dtypes must stay fp32 unless
``use_precision_aware_optimizer`` is set, which needs Adam. ``main_grads_dtype`` acts through Megatron-LM's
``validate_args``: with bf16 (or fp8) training it forces ``accumulate_allreduce_grads_in_fp32`` only while
``main_grads_dtype`` is fp32, so ``main_grads_dtype: bf16`` leaves the DDP gradient buffer in bf16
(``ExecutionSpec.grad_reduce_in_bf16``).
"""

from __future__ import annotations

from typing import Any

from primus_ext.recipe.args import ArgReader

DTYPE_CHOICES = {
    "main_params_dtype": ("fp32", "fp16"),
    "main_grads_dtype": ("fp32", "bf16"),
    "exp_avg_dtype": ("fp32", "fp16", "bf16", "fp8"),
    "exp_avg_sq_dtype": ("fp32", "fp16", "bf16", "fp8"),
}
"""Megatron-LM's ``--main-params-dtype`` / ``--main-grads-dtype`` / ``--exp-avg-dtype`` / ``--exp-avg-sq-dtype``
choices."""


def optimizer_dtypes(a: ArgReader) -> dict[str, Any]:
    """The spec's optimizer fields; megatron-core's refusals become problems on the key at fault."""
    aware = a.bool("use_precision_aware_optimizer")
    dtypes = {k: a.choice(k, choices, "fp32") or "fp32" for k, choices in DTYPE_CHOICES.items()}
    optimizer = a.raw("optimizer")
    if aware and optimizer not in (None, "adam"):
        a.bad("use_precision_aware_optimizer", f"megatron-core supports it only with adam, not {optimizer}",
              fix="set optimizer: adam or use_precision_aware_optimizer: false")
    if not aware:
        for key, value in dtypes.items():
            if value != "fp32":
                a.bad(key, f"megatron-core allows {value} only with the precision-aware optimizer",
                      fix=f"set use_precision_aware_optimizer: true or {key}: fp32")
    return {
        "use_precision_aware_optimizer": aware,
        "main_params_dtype": dtypes["main_params_dtype"],
        "exp_avg_dtype": dtypes["exp_avg_dtype"],
        "exp_avg_sq_dtype": dtypes["exp_avg_sq_dtype"],
        "store_param_remainders": a.bool("store_param_remainders", True),
        "bf16_main_grads": aware and dtypes["main_grads_dtype"] == "bf16"
        and not a.bool("accumulate_allreduce_grads_in_fp32"),
    }
