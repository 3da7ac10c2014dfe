"""Megatron-LM command lines that Megatron-LM's own parser accepts, at every supported release.

    from primus_ext.launcher.megatron_cli import megatron_argv
    built = megatron_argv(recipe.megatron_args)     # MegatronArgv: argv (flags) and dropped (key, value, why)

``flags.json`` lists the options of ``megatron/training/arguments.py`` at ``SUPPORTED_TAGS``, generated from the
releases themselves (``upstream.py``); a recipe key becomes the option whose ``dest`` it is (``fp8`` ->
``--fp8-format``), and a key no supported release accepts (a Primus-only key, a value outside the choices) is
dropped with the reason.
"""

from primus_ext.launcher.megatron_cli.argv import Dropped, MegatronArgv, dropped_lines, megatron_argv
from primus_ext.launcher.megatron_cli.flags import SUPPORTED_TAGS, FlagTable, MegatronOption, flag_table

__all__ = ["SUPPORTED_TAGS", "Dropped", "FlagTable", "MegatronArgv", "MegatronOption", "dropped_lines", "flag_table",
           "megatron_argv"]
