"""The pipeline schedule a recipe's keys select: Megatron's VPP, Primus's zero-bubble patch and Primus-pipeline's
``pp_algorithm`` (modules/megatron/zero_bubble.yaml, primus_pipeline.yaml, zerobubble/README.md's flag table,
backends/megatron/core/pipeline_parallel/zerobubble/zbpp_utils.py's validate_arguments)."""

from __future__ import annotations

from primus_ext.model.pipeline.registry import by_primus_name, get_schedule, spec_schedule
from primus_ext.recipe.args import ArgReader

V_MEM_SETUPS = {"zb": "zb-v", "half": "v-half", "min": "v-min"}
"""Primus ``zero_bubble_v_schedule_mem_setup`` -> the V schedule it runs (zerobubble/README.md's flag table)."""


def schedule_from_keys(a: ArgReader, pp: int, vpp: int | None) -> str:
    """The schedule the recipe's keys select (registry names): Primus's zero-bubble patch (``patch_zero_bubble``
    with ``zero_bubble_v_schedule`` + ``zero_bubble_v_schedule_mem_setup`` for the V family, and
    ``zero_bubble_max_pending_backward`` >= 2*PP for ZB-H2: zero_bubble.yaml), Primus-pipeline's ``pp_algorithm``,
    else Megatron's 1F1B / interleaved (VPP > 1)."""
    requested = get_schedule("1f1b")
    patched = a.bool("patch_zero_bubble")
    if patched and a.bool("enable_1f1b_v"):  # zbpp_utils.py: 1F1B-V runs with enable_zero_bubble off
        a.warnings.append("enable_1f1b_v (1F1B on a V placement) is projected as V-half (the V schedule with "
                          "1F1B's activation memory)")
        requested = get_schedule("v-half")
    # zbpp_utils.py validate_arguments: zero_bubble_v_schedule turns enable_zero_bubble on
    elif patched and (a.bool("enable_zero_bubble", True) or a.bool("zero_bubble_v_schedule")):
        requested = by_primus_name("patch_zero_bubble") or requested
        pending = a.raw("zero_bubble_max_pending_backward")
        if isinstance(pending, str) and pending.strip().isdigit():
            pending = int(pending)  # a key=value override arrives as text
        if a.bool("zero_bubble_v_schedule"):
            setup = a.choice("zero_bubble_v_schedule_mem_setup", tuple(V_MEM_SETUPS), "half")
            requested = get_schedule(V_MEM_SETUPS[setup or "half"])
        elif isinstance(pending, int) and not isinstance(pending, bool) and pending >= 2 * pp:
            requested = get_schedule("zb-h2")  # zero_bubble.yaml: 2*stages pending backwards = zb2p
        elif pending == "auto" and pp > 1:
            a.warnings.append("zero_bubble_max_pending_backward: auto (adaptive memory limit) is projected as ZB-H1 "
                              "(zb1p); set it to 2*PP for ZB-H2")
    if a.bool("patch_primus_pipeline"):
        algorithm = a.raw("pp_algorithm")
        chosen = by_primus_name(algorithm) if isinstance(algorithm, str) else None
        if chosen is None:
            a.bad("pp_algorithm", "unknown Primus pipeline algorithm",
                  fix="use one of 1f1b, 1f1b-interleaved, zero-bubble, zero-bubble-heuristic, zbv-formatted, v-half, "
                      "v-min")
        else:
            requested = chosen
    if requested.fixed_chunks and pp > 1:
        return requested.name  # V schedules set VPP = 2 themselves (zbpp_utils.py); legality checks the rest
    # registry.spec_schedule: one stage → 1F1B; the zero-bubble flag wins over VPP; any VPP given → interleaved
    return spec_schedule(requested, pp, (2 if vpp else 1) if pp > 1 else 1).name


def schedule_vpp(schedule: str, pp: int, vpp: int | None) -> int | None:
    """The VPP a run of ``schedule`` has: a Primus V schedule at PP >= 2 runs two chunks per rank (zbpp_utils.py
    sets VPP = 2 itself; the recipe states none), so its execution says 2, as the tuner writes it (one spelling of
    one configuration: a tuned V schedule reloads to the same execution); else ``vpp`` as the keys give it."""
    chosen = get_schedule(schedule)
    if vpp is None and pp > 1 and chosen.fixed_chunks and chosen.chunk_placement == "v" and \
            chosen.recipe_keys(pp) is not None:
        return chosen.fixed_chunks
    return vpp


def what_if_schedule(name: object, path: str, pp: int, vpp: int | None, own: str,
                     problems: list, warnings: list[str]) -> str | None:
    """The schedule ``--schedule NAME`` / the ``# primus-ext: {schedule: NAME}`` comment asks for (registry name),
    or None with a problem at ``path`` when it is unknown. A schedule no Primus / Megatron-LM key runs (DualPipe,
    DualPipeV) is a what-if, said in a warning with what the recipe's own keys run (``own``); one that keys run
    names them (``Schedule.recipe_keys``): the recipe would need them to run it."""
    from primus_ext.errors import Problem
    from primus_ext.model.pipeline.registry import SCHEDULES

    if not isinstance(name, str) or name not in SCHEDULES:
        problems.append(Problem(path=path, value=name, message="unknown pipeline schedule",
                                fix=f"use one of {', '.join(SCHEDULES)}"))
        return None
    chosen, running = get_schedule(name), get_schedule(own)
    keys = chosen.recipe_keys(pp)
    if keys is None:
        warnings.append(f"{path} {name}: {chosen.label} is a what-if: no Primus or Megatron-LM key runs it (the "
                        f"recipe's own keys run {running.label}); projected with its own micro-batch rule, stage "
                        "placement and two chunks per rank")
    elif name != own and chosen.fixed_chunks is None and chosen.resolve(pp, vpp) is not chosen:
        warnings.append(f"{path} {name}: at PP={pp}, VPP={vpp or 1} megatron-core runs "
                        f"{chosen.resolve(pp, vpp).label} instead")
    elif name != own and chosen.splits_wgrad:
        written = ", ".join(f"{k}: {v}" for k, v in keys.items())
        warnings.append(f"{path} {name}: projected as {chosen.label}; the recipe's keys run {running.label} "
                        f"(Primus runs {chosen.label} with {written})")
    return name
