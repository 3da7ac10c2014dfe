"""Recipe arguments -> the flags of Megatron-LM's ``pretrain_gpt.py`` that every supported release accepts (pure).

    built = megatron_argv({"fp8": "hybrid", "sequence_parallel": 1, "enable_primus_turbo": True})
    built.argv      # ('--fp8-format', 'hybrid', '--sequence-parallel')
    built.dropped   # (Dropped(key='enable_primus_turbo', value=True, reason='not an argument of ...'),)

A key is the ``dest`` of a Megatron option (``fp8`` is ``--fp8-format``'s). ``True`` is the option's
``store_true`` flag, ``False`` its ``store_false`` one (``--no-x``), a value its ``store`` flag and the value, a list
the flag and its values (a list option); a value equal to Megatron's default is not written, nor is ``None`` (the
default; a null has no command-line spelling). Dropped, with the reason: a key no supported release defines (Primus
and Primus-Turbo keys), one only some releases define, a value outside the option's choices, a mapping, a list for a
one-value option, a boolean for an option that takes a value, and the Megatron keys a Primus switch turns off.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from primus_ext.launcher.megatron_cli.flags import MIXED_NARGS, FlagTable, MegatronOption, PartialOption, flag_table

PRIMUS_SWITCHES: dict[str, tuple[str, ...]] = {
    # Primus's disable_wandb: true (its default, configs/modules/megatron/primus_megatron_module.yaml) sets
    # args.wandb_project = None (primus/backends/megatron/patches/args/wandb_config_patches.py at fd1eeab);
    # Megatron-LM logs to W&B whenever wandb_project is set, so the key goes with the switch.
    "disable_wandb": ("wandb_project", "wandb_exp_name", "wandb_entity", "wandb_save_dir"),
}
"""Primus-only switches (when true) -> the Megatron keys Primus ignores because of them."""


@dataclass(frozen=True, kw_only=True)
class Dropped:
    """A recipe key left off the Megatron command line, and why."""

    key: str
    value: Any
    reason: str


@dataclass(frozen=True, kw_only=True)
class MegatronArgv:
    argv: tuple[str, ...]
    """The flags and values, in the recipe's key order."""
    dropped: tuple[Dropped, ...]


def _flag_for(options: tuple[MegatronOption, ...], want: bool) -> str | None:
    """The flag that sets the dest to ``want`` (a ``store_true``/``store_false``/``--x``/``--no-x`` action)."""
    for o in options:
        if o.kind == ("store_true" if want else "store_false"):
            return o.flags[0]
        if o.kind == "BooleanOptionalAction":
            return next((f for f in o.flags if f.startswith("--no-") != want), None)
    return None


def _is_default(option: MegatronOption, value: Any) -> bool:
    if not option.default_known:
        return False
    if isinstance(value, list | tuple):
        return isinstance(option.default, list) and list(value) == option.default
    return value == option.default and type(value) is type(option.default)


def _boolean(key: str, value: Any, options: tuple[MegatronOption, ...]) -> tuple[list[str], str | None]:
    want = bool(value)
    flag = _flag_for(options, want)
    if flag is not None:
        return [flag], None
    if all(o.default_known and bool(o.default) == want for o in options):
        return [], None  # Megatron's default already
    return [], f"Megatron-LM has no flag that sets {key} to {want}"


def _valued(option: MegatronOption, value: Any) -> tuple[list[str], str | None]:
    if _is_default(option, value):
        return [], None
    if isinstance(value, Mapping):
        return [], "a mapping: Megatron-LM's command line takes no such value"
    if isinstance(value, bool):
        return [], f"a boolean for {option.flags[0]}, which takes a value"
    listed = option.nargs in ("+", "*") or isinstance(option.nargs, int)
    values = list(value) if isinstance(value, list | tuple) else [value]
    if option.nargs == MIXED_NARGS and len(values) != 1:
        return [], f"{option.flags[0]} takes one value in some supported releases and a list in others"
    if isinstance(value, list | tuple) and not listed and option.nargs != MIXED_NARGS:
        return [], f"a list for {option.flags[0]}, which takes one value"
    if isinstance(option.nargs, int) and len(values) != option.nargs:
        return [], f"{option.flags[0]} takes {option.nargs} values, not {len(values)}"
    if option.nargs == "+" and not values:
        return [], f"an empty list for {option.flags[0]}, which takes one or more values"
    if option.choices is not None:
        allowed = {str(c) for c in option.choices}
        bad = [v for v in values if str(v) not in allowed]
        if bad:
            shown = ", ".join(str(c) for c in option.choices)
            return [], f"{bad[0]!r} is not among {option.flags[0]}'s choices ({shown})"
    return [option.flags[0], *(str(v) for v in values)], None


def _one(key: str, value: Any, options: tuple[MegatronOption, ...]) -> tuple[list[str], str | None]:
    flags_only = all(o.kind != "store" for o in options)
    if flags_only:
        if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
            return _boolean(key, value, options)
        return [], f"{value!r} for a flag that is on or off"
    valued = next(o for o in options if o.kind == "store")
    if isinstance(value, bool) and _flag_for(options, value) is not None:  # a dest with both a flag and a value
        return _boolean(key, value, options)
    return _valued(valued, value)


def _partial_default(partial: PartialOption, value: Any) -> bool:
    return partial.default_known and (value == partial.default or (value is False and partial.default is None))


def megatron_argv(args: Mapping[str, Any], table: FlagTable | None = None) -> MegatronArgv:
    """``args`` (a recipe's merged Megatron arguments) as flags of ``table`` (default: the committed one)."""
    table = table or flag_table()
    span = f"{table.tags[0]} .. {table.tags[-1]}"
    switched = {k: s for s, keys in PRIMUS_SWITCHES.items() if args.get(s) is True for k in keys}
    argv: list[str] = []
    dropped: list[Dropped] = []
    for key, value in args.items():
        if value is None:
            continue
        options = table.options.get(key)
        if key in switched and value is not False:
            reason = f"Primus's {switched[key]}: true turns it off, and Megatron-LM would act on it"
        elif options is None and key in table.partial and _partial_default(table.partial[key], value):
            continue  # the default of the releases that define it: leaving it out changes nothing
        elif options is None and key in table.partial:
            reason = f"defined only by {', '.join(table.partial[key].tags)} of the supported Megatron-LM releases"
        elif options is None:
            reason = f"not an argument of Megatron-LM's parser ({span}): a Primus or Primus-Turbo key"
        else:
            flags, reason = _one(key, value, options)
            argv += flags
        if reason is not None:
            dropped.append(Dropped(key=key, value=value, reason=reason))
    return MegatronArgv(argv=tuple(argv), dropped=tuple(dropped))


def dropped_lines(dropped: Sequence[Dropped], width: int = 110) -> list[str]:
    """The dropped keys grouped by reason, wrapped to ``width``: ``<reason>: key, key, ...`` (one reason a line,
    its keys continued on indented lines)."""
    import textwrap

    by_reason: dict[str, list[str]] = {}
    for d in dropped:
        by_reason.setdefault(d.reason, []).append(d.key)
    lines = []
    for reason, keys in by_reason.items():
        lines += textwrap.wrap(f"{reason}: {', '.join(keys)}", width=width, subsequent_indent="    ",
                               break_on_hyphens=False)
    return lines
