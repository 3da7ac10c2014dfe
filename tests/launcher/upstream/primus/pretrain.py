"""Test fixture: records that Primus's real launch path was taken."""

LAUNCHED = []


def launch_pretrain_from_cli(args, overrides):
    LAUNCHED.append((args.config, list(overrides)))
