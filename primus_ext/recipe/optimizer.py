"""Megatron's precision-aware optimizer arguments -> the ``ExecutionSpec`` optimizer fields.

megatron-core 0.16.1 ``OptimizerConfig.__post_init__``: the four dtypes must stay fp32 unless
``use_precision_aware_optimizer`` is set; ``main_grads_dtype`` is validated but has no memory effect there
(the DDP gradient buffer follows ``grad_reduce_in_bf16``), so it is checked and not carried.
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
    }
