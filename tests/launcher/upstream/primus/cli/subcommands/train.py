###############################################################################
# Test fixture: Primus primus/cli/subcommands/train.py as of AMD-AGI/Primus fd1eeab (= v26.5.0, v26.5.1)
###############################################################################
# Reproduces only the structure patches/primus-train-projection-only.patch relies on: `run(args,
# overrides)`, whose docstring closes right before the `if args.suite == "pretrain":` dispatch to
# `PrimusRuntime(args=args).run_train_module(module_name=..., overrides=...)`, and
# `register_subcommand(subparsers)`, which adds the `pretrain` / `posttrain` suites to `suite_parsers`
# with `add_pretrain_parser` / `add_posttrain_parser` from `primus.core.launcher.parser` and ends with a
# blank line, then `parser.set_defaults(func=run)`.

from __future__ import annotations


def run(args, overrides):
    """
    Entry point for the 'train' subcommand.
    """
    if args.suite == "pretrain":
        from primus.core.runtime.train_runtime import PrimusRuntime

        PrimusRuntime(args=args).run_train_module(module_name="pre_trainer", overrides=overrides or [])
    elif args.suite == "posttrain":
        from primus.core.runtime.train_runtime import PrimusRuntime

        PrimusRuntime(args=args).run_train_module(module_name="post_trainer", overrides=overrides or [])
    else:
        raise NotImplementedError(f"Unsupported train suite: {args.suite}")


def register_subcommand(subparsers):
    """
    Register `primus train {pretrain,posttrain}`; returns the parser of `train`.
    """
    parser = subparsers.add_parser("train", help="Launch Primus training")
    suite_parsers = parser.add_subparsers(dest="suite", required=True)

    pretrain = suite_parsers.add_parser("pretrain", help="Pre-training workflow.")
    from primus.core.launcher.parser import add_pretrain_parser

    add_pretrain_parser(pretrain)

    posttrain = suite_parsers.add_parser("posttrain", help="Post-training workflow.")
    from primus.core.launcher.parser import add_posttrain_parser

    add_posttrain_parser(posttrain)

    parser.set_defaults(func=run)

    return parser
