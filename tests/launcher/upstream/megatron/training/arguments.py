"""Stand-in for Megatron-LM's ``megatron/training/arguments.py`` (tests/launcher/test_patches.py only).

The calling conventions the patched ``pretrain_gpt.py`` meets: ``parse_args(extra_args_provider=None,
ignore_unknown_args=False)`` builds the argparse parser, lets the provider extend it, then calls
``parser.parse_args()`` (or ``parse_known_args()``) on ``sys.argv`` - as in every Megatron-LM version
from core_v0.13 to main - and ``parse_and_validate_args(extra_args_provider=None,
ignore_unknown_args=False, args_defaults=None)`` (core_v0.18 .. main) parses, then validates. The
parser is ``standin_megatron``'s subset of Megatron's arguments, plus ``--tokenizer-type``.
"""

from dataclasses import dataclass
from typing import Any

from standin_megatron import _megatron_parser


@dataclass
class ConfigContainer:
    """What core_v0.18+'s ``pretrain_cfg_container_from_args`` builds from the parsed arguments."""

    args: Any


def parse_args(extra_args_provider=None, ignore_unknown_args=False):
    parser = _megatron_parser()
    parser.add_argument("--tokenizer-type", default=None)
    if extra_args_provider is not None:
        parser = extra_args_provider(parser)
    if ignore_unknown_args:
        args, _ = parser.parse_known_args()
    else:
        args = parser.parse_args()
    return args


def parse_and_validate_args(extra_args_provider=None, ignore_unknown_args=False, args_defaults=None):
    args = parse_args(extra_args_provider, ignore_unknown_args)
    for key, value in (args_defaults or {}).items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    print("megatron: arguments validated")
    return args


def pretrain_cfg_container_from_args(args):
    return ConfigContainer(args=args)
