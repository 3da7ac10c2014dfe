"""primus-ext's merged Megatron arguments against Primus's own config loader, recipe by recipe.

    python benchmarks/primus_loader_parity.py --primus /path/to/Primus [--gpus MI300X,MI325X] [--list]

``--primus`` is a Primus checkout (a work tree: Primus's loader is imported from it, run, and nothing of it is
kept). For every ``examples/megatron/configs/<GPU>/**/*.yaml`` it loads the experiment with Primus's
``primus.core.config.primus_config.load_primus_config`` (what the training runtime calls) and with
``primus_ext.recipe.load_recipe`` (no ``--config-root``: the checkout is found above the recipe), and compares
the training module's merged parameters key by key. Prints the recipes compared, the keys that differ
(``model``, the preset name Primus adds as metadata, is expected) and the recipes either side could not load.
``${VAR:default}`` templates see an empty environment on both sides.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
from collections import defaultdict
from pathlib import Path

EXPECTED = {"model"}
"""Keys only Primus's side has: the model preset's name, kept as metadata by ``PrimusParser``."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--primus", type=Path, required=True, help="a Primus checkout (work tree)")
    parser.add_argument("--gpus", default="MI300X,MI325X")
    parser.add_argument("--list", action="store_true", help="every differing value")
    args = parser.parse_args(argv)
    root = args.primus.resolve()
    if not (root / "primus" / "core" / "config" / "primus_config.py").is_file():
        print(f"{root} is not a Primus work tree (primus/core/config/primus_config.py missing)", file=sys.stderr)
        return 2
    for name in [k for k in os.environ if k.startswith("PRIMUS_")]:
        del os.environ[name]  # templates take their defaults on both sides
    sys.path.insert(0, str(root))
    os.chdir(root)  # Primus resolves its experiment paths from the working directory
    from primus.core.config.primus_config import get_module_config, load_primus_config
    from primus.core.utils.yaml_utils import nested_namespace_to_dict

    from primus_ext.errors import PrimusExtError
    from primus_ext.recipe import load_recipe

    folder = Path("examples/megatron/configs")
    recipes = [p for gpu in args.gpus.split(",") for p in sorted((folder / gpu).rglob("*.yaml"))]
    differs: dict[str, list[tuple[str, object, object]]] = defaultdict(list)
    compared, failed = 0, []
    for path in recipes:
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                cfg = load_primus_config(path)
            module = get_module_config(cfg, cfg.modules[0].name)
            theirs = nested_namespace_to_dict(module.params)
        except Exception as err:  # Primus's loader refusing a file is a finding, not a crash of this script
            failed.append((str(path), f"Primus: {type(err).__name__}: {str(err)[:80]}"))
            continue
        try:
            ours = dict(load_recipe(path, validate=False, env={}, nodes=64).megatron_args)
        except PrimusExtError as err:
            failed.append((str(path), f"primus-ext: {str(err).splitlines()[1].strip()[:100]}"))
            continue
        compared += 1
        for key in sorted(set(theirs) | set(ours)):
            if theirs.get(key, "<absent>") != ours.get(key, "<absent>"):
                differs[key].append((path.name, theirs.get(key, "<absent>"), ours.get(key, "<absent>")))
    print(f"{len(recipes)} recipes ({args.gpus}) in {root}: {compared} loaded by both and compared")
    for key, rows in sorted(differs.items(), key=lambda kv: -len(kv[1])):
        note = " (expected: Primus's metadata)" if key in EXPECTED else ""
        print(f"  `{key}` differs in {len(rows)}{note}")
        for name, theirs, ours in rows if args.list else rows[:1]:
            print(f"      {name}: Primus {theirs!r:.60} / primus-ext {ours!r:.60}")
    print(f"  not loaded by one side: {len(failed)}")
    for name, why in failed:
        print(f"      {name}: {why}")
    unexpected = [k for k in differs if k not in EXPECTED]
    print(f"keys differing beyond Primus's metadata: {len(unexpected)}")
    return 1 if unexpected else 0


if __name__ == "__main__":
    raise SystemExit(main())
