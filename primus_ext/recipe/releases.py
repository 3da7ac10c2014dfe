"""Keys across Primus releases: a key an earlier Primus release had and Primus HEAD removed or renamed is read as the
release the recipe comes from meant it, with a warning naming that release; refused only where its meaning is unknown.

A real run's effective plan from an earlier release carries such keys (``shared/validation/logs``: the MI355X runs'
``use_turbo_grouped_mlp``); Primus HEAD asserts at start-up that they are gone, but the run they describe trained
with their old meaning, and that is what the projection prices::

    args, notes, problems = read_release_keys({"use_turbo_grouped_mlp": True})
    # args["use_turbo_grouped_gemm"] is True; notes names Primus v26.3.1 and the commit that renamed it

The table was built by diffing the top-level keys of Primus's ``primus/configs/{models,modules}/megatron/*.yaml``
at each release tag against HEAD (``git -C Primus ls-tree`` + ``yaml.safe_load``, v0.5.0 ... v26.5.1), then
``git log -S KEY`` for the commit that removed each one; each entry cites it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from primus_ext.errors import Problem

Reading = Literal["renamed", "no effect", "not modelled", "unknown"]


@dataclass(frozen=True, kw_only=True)
class ReleaseKey:
    """A key of an earlier Primus release that Primus HEAD no longer has."""

    last_release: str
    """The last Primus release tag whose presets carry the key."""
    change: str
    """The Primus commit (and pull request) that removed or renamed it."""
    reading: Reading
    """``renamed``: its value means ``reads_as`` (merged by ``or``, as that release did); ``no effect``: the release
    read it for nothing that changes step time or memory; ``not modelled``: it changed a kernel choice the projection
    does not price (projected as the default); ``unknown``: refused (no one can say what the run did)."""
    reads_as: str = ""
    """The key it was renamed to (``renamed`` only)."""
    meant: str
    """What the key did in that release, in a few words."""


RELEASE_KEYS: dict[str, ReleaseKey] = {
    # Primus de27cd43 (#769, 2026-06-16, first in v26.4.0) renamed both and made the old names a start-up assert;
    # up to v26.3.1, transformer_engine_spec_provider.py:176 read `use_turbo_grouped_gemm or use_turbo_grouped_mlp`
    # and its linear-module selection `use_turbo_gemm or use_turbo_parallel_linear`
    "use_turbo_grouped_mlp": ReleaseKey(last_release="v26.3.1", change="de27cd43 (#769)", reading="renamed",
                                        reads_as="use_turbo_grouped_gemm", meant="Primus-Turbo grouped GEMM for MoE"),
    "use_turbo_parallel_linear": ReleaseKey(last_release="v26.3.1", change="de27cd43 (#769)", reading="renamed",
                                            reads_as="use_turbo_gemm", meant="Primus-Turbo GEMM for the linears"),
    # Primus e0fe01fb (#714, 2026-05-08): "Remove the temporary disable_turbo_grouped_mlp_low_precision switch ...
    # the FP8 grouped-gemm path is now driven solely by the global Turbo FP8 state" (added by d2af5327, #633)
    "disable_turbo_grouped_mlp_low_precision": ReleaseKey(
        last_release="v26.2", change="e0fe01fb (#714)", reading="not modelled",
        meant="kept the Turbo grouped GEMM in BF16 under FP8 (a kernel choice: step time)"),
    # Primus b8d3cc52 (#997, 2026-08-20): "remove use_turbo_fp4_autocast flag; ... now depend only on
    # enable_primus_turbo" (added by 62f00c35, #982; an earlier copy removed by 03eedade, #860)
    "use_turbo_fp4_autocast": ReleaseKey(
        last_release="v26.4.0", change="b8d3cc52 (#997)", reading="not modelled",
        meant="FP4 autocast through Primus-Turbo (a kernel choice: step time)"),
    # Primus 11750497 (#333, 2026-01-26) "megatron: remove useless parameters from base configuration"
    "parallel_output": ReleaseKey(last_release="v0.7.0", change="11750497 (#333)", reading="no effect",
                                  meant="a base-config parameter no trainer read"),
    "s3_cache_path": ReleaseKey(last_release="v0.7.0", change="11750497 (#333)", reading="no effect",
                                meant="a data-cache path"),
    # Primus 6bad6956 (#870, 2026-07-16) dead-code cleanup; added by d1bb0f88 (#483) for the Muon optimizer
    "muon_weight_decay": ReleaseKey(last_release="v26.4.0", change="6bad6956 (#870)", reading="no effect",
                                    meant="the Muon optimizer's weight decay (numerics only)"),
    "muon_weight_decay_method": ReleaseKey(last_release="v26.4.0", change="6bad6956 (#870)", reading="no effect",
                                           meant="the Muon optimizer's weight-decay rule (numerics only)"),
}
"""Keys of earlier Primus releases that Primus HEAD removed or renamed, with the commit that did."""


def _set(value: Any) -> bool:
    return value not in (None, False, 0, "", (), [])


def _note(key: str, entry: ReleaseKey, reading: str) -> str:
    return (f"`{key}` is a key of Primus {entry.last_release} and earlier ({entry.meant}; removed at Primus "
            f"{entry.change}): read as that release meant it, {reading}")


def read_release_keys(args: Mapping[str, Any]) -> tuple[dict[str, Any], list[str], list[Problem]]:
    """(``args`` with each earlier release's key read as that release meant it, one warning per key so read, a
    problem per key whose meaning is unknown). Keys set to an unset-like value (``False``, ``None``) are dropped
    silently: they select nothing in any release."""
    out = dict(args)
    notes: list[str] = []
    problems: list[Problem] = []
    for key, entry in RELEASE_KEYS.items():
        if key not in out:
            continue
        value = out.pop(key)
        if not _set(value):
            continue
        if entry.reading == "renamed":
            out[entry.reads_as] = out.get(entry.reads_as) or value
            notes.append(_note(key, entry, f"`{entry.reads_as}` = {out[entry.reads_as]!r}"))
        elif entry.reading == "unknown":
            problems.append(Problem(path=key, value=value,
                                    message=f"`{key}` was removed at Primus {entry.change} and what Primus "
                                            f"{entry.last_release} did with it is not known",
                                    fix=f"remove {key}, or write the setting it stood for under its current name"))
        else:
            notes.append(_note(key, entry, f"{entry.reading} ({value!r} projected as the default)"))
    return out, notes, problems
