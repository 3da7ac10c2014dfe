"""``primus-ext profile pin``: state kernel efficiencies measured on a GPU in its family's hardware profiles.

    python benchmarks/gpu_kernel_sweep.py --out sweep.json                 # on the GPU (~20 s on an H200)
    primus-ext profile pin sweep.json                                      # what it would pin (writes nothing)
    primus-ext profile pin sweep.json --out primus_ext/hardware/profiles   # write them (or a $PRIMUS_EXT_PROFILES dir)
    primus-ext validate ... --fit --write-profiles primus_ext/hardware/profiles   # refit the rest around them

The sweep's device name picks the profile (``NVIDIA B200`` -> ``b200``; ``--gpu`` when its name is not a
profile's); the values are fractions of that GPU's datasheet peaks, stated unchanged in every profile of its
family (a family shares its efficiency fractions), listed in ``efficiency.measured`` (the calibration keeps them)
with a comment citing the device and the sweep file.
``--out`` a folder of your own (on ``$PRIMUS_EXT_PROFILES``) receives a copy of every profile of the family,
which then takes precedence over the shipped ones. By default only ``attention`` is pinned (cuDNN causal
attention, 128-wide heads, 4096 tokens); ``--pin attention hbm`` adds the HBM copy rate.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from primus_ext.cli._args import positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    from primus_ext.hardware.kernels import ATTENTION_BACKEND, ATTENTION_TOKENS, PINNABLE

    parser = subparsers.add_parser("profile", help="hardware profiles: pin kernel efficiencies measured on a GPU")
    actions = parser.add_subparsers(dest="profile_command", metavar="ACTION", required=True)
    pin = actions.add_parser("pin", help="state a kernel sweep's efficiencies as measured in the GPU family's profiles",
                             description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    pin.add_argument("sweep", help="the JSON `python benchmarks/gpu_kernel_sweep.py --out` wrote on the GPU")
    pin.add_argument("--gpu", help="the profile of the GPU that ran it (default: read from the sweep's device name)")
    pin.add_argument("--pin", nargs="+", choices=PINNABLE, default=["attention"], metavar="NAME",
                     help=f"efficiencies to pin: {', '.join(PINNABLE)} (default: attention)")
    pin.add_argument("--attention-tokens", type=positive_int, default=ATTENTION_TOKENS,
                     help=f"sequence length the attention value is read at (default {ATTENTION_TOKENS})")
    pin.add_argument("--attention-backend", default=ATTENTION_BACKEND,
                     help=f"SDPA backend the attention value is read from (default {ATTENTION_BACKEND})")
    pin.add_argument("--out", metavar="DIR",
                     help="write the family's profiles into DIR (primus_ext/hardware/profiles to ship them); "
                          "without it, print what would be pinned")
    pin.set_defaults(func=run_pin)


def _gpu_of(device: str, given: str | None) -> tuple[str | None, list]:
    """The profile named by ``--gpu`` or by the sweep's device name, and the problems: neither names a profile,
    they name GPUs of different families, or the profile has no family."""
    from primus_ext.errors import Problem, RecipeError
    from primus_ext.hardware import canonical_name, load_gpu, profile_of_device

    named = profile_of_device(device)
    if given is None:
        if named is None:
            return None, [Problem(path="device", value=device, message="the sweep's device names no hardware profile",
                                  fix="name the GPU's profile with --gpu")]
        gpu = named
    else:
        gpu = canonical_name(given)
        try:
            family = load_gpu(gpu).family
        except RecipeError as err:  # an unknown name: the error lists the profiles
            return None, [replace(p, path="--gpu") for p in err.problems]
        if named is not None and load_gpu(named).family != family:
            return None, [Problem(path="--gpu", value=given, message=f"the sweep ran on {device} ({named}, family "
                                  f"{load_gpu(named).family or 'none'}), not on a GPU of family {family or 'none'}",
                                  fix=f"drop --gpu (the sweep's GPU is {named}) or pass the sweep of a {gpu}")]
    if not load_gpu(gpu).family:
        return None, [Problem(path="--gpu", value=gpu, message="the profile has no GPU family",
                              fix="state family: in the profile (its calibration is per family)")]
    return gpu, []


def _source(path: Path) -> str:
    """How the profile comment cites the sweep: relative to the working folder (the repository, for a committed
    sweep) when it lies below it, else as given."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def run_pin(args: argparse.Namespace) -> int:
    from primus_ext.errors import RecipeError
    from primus_ext.hardware import family_profiles, load_gpu
    from primus_ext.hardware.kernels import as_fractions, pin_measured, read_sweep, sweep_rates

    path = Path(args.sweep)
    sweep = read_sweep(path)
    device = sweep["device"]
    name, problems = _gpu_of(device, args.gpu)
    rates, missing = sweep_rates(sweep, tuple(args.pin), attention_tokens=args.attention_tokens,
                                 attention_backend=args.attention_backend)
    if problems or missing:
        raise RecipeError(problems=problems + missing, source=f"kernel sweep {path}", what="invalid")
    gpu = load_gpu(name)
    found = as_fractions(rates, gpu)
    family = family_profiles(gpu.family)
    print(f"sweep {path}: {device} (torch {sweep.get('torch', '?')}) -> family {gpu.family}: {', '.join(family)}")
    for e in found:
        stated = ", ".join(f"{p} {getattr(load_gpu(p).efficiency, e.name):.4g}"
                           + (" measured" if e.name in load_gpu(p).efficiency.measured else "") for p in family)
        print(f"  {e.name:<10} {e.value:.4f}  {e.what}   (profiles now: {stated})")
    if not args.out:
        print("nothing written: pass --out DIR to write the profiles")
        return 0
    written = pin_measured(found, device=device, source=_source(path), family=gpu.family, folder=Path(args.out))
    print("wrote " + ", ".join(str(p) for p in written))
    print("next: `primus-ext validate MEASUREMENTS.csv --archs ARCHS.csv --fit --write-profiles DIR` keeps the pinned "
          "values and refits the other efficiencies of a family with validation rows around them (a family on the "
          "pooled prior keeps the prior's); DIR on $PRIMUS_EXT_PROFILES, or the shipped folder")
    return 0
