"""``primus-ext profile pin``: state kernel efficiencies measured on a GPU in its family's hardware profiles.

    python benchmarks/gpu_kernel_sweep.py --out sweep.json                 # on the GPU (~2 min)
    primus-ext profile pin sweep.json                                      # what it would pin (writes nothing)
    primus-ext profile pin sweep.json --out primus_ext/hardware/profiles   # write them (or a $PRIMUS_EXT_PROFILES dir)
    primus-ext validate ... --fit --write-profiles primus_ext/hardware/profiles   # refit the rest around them

The sweep's device name picks the profile (``NVIDIA B200`` -> ``b200``; ``--gpu`` when its name is not a
profile's); every profile of that GPU's family gets the values, as fractions of its own datasheet peaks, listed
in ``efficiency.measured`` (the calibration keeps them) with a comment citing the device and the sweep file.
By default only ``attention`` is pinned (cuDNN causal attention, 128-wide heads, 4096 tokens); ``--pin
attention hbm`` adds the HBM copy rate.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def _tokens(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of tokens >= 1, not {text!r}")
    return value


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
    pin.add_argument("--attention-tokens", type=_tokens, default=ATTENTION_TOKENS,
                     help=f"sequence length the attention value is read at (default {ATTENTION_TOKENS})")
    pin.add_argument("--attention-backend", default=ATTENTION_BACKEND,
                     help=f"SDPA backend the attention value is read from (default {ATTENTION_BACKEND})")
    pin.add_argument("--out", metavar="DIR",
                     help="write the family's profiles into DIR (primus_ext/hardware/profiles to ship them); "
                          "without it, print what would be pinned")
    pin.set_defaults(func=run_pin)


def _gpu_of(device: str, given: str | None) -> str:
    """The profile named by ``--gpu`` or by the sweep's device name; a clear error when neither names one, or
    when they name GPUs of different families."""
    from primus_ext.errors import Problem, RecipeError
    from primus_ext.hardware import canonical_name, load_gpu, profile_of_device

    named = profile_of_device(device)
    if given is None:
        if named is None:
            raise RecipeError(problems=[Problem(path="device", value=device, message="names no hardware profile",
                                                fix="name the GPU's profile with --gpu")], source="kernel sweep")
        return named
    gpu = canonical_name(given)
    family = load_gpu(gpu).family  # an unknown name is an error listing the profiles
    if named is not None and load_gpu(named).family != family:
        raise RecipeError(problems=[Problem(
            path="--gpu", value=given, message=f"the sweep ran on {device} ({named}, family "
            f"{load_gpu(named).family or 'none'}), not on a GPU of family {family or 'none'}",
            fix=f"drop --gpu (the sweep's GPU is {named}) or pass the sweep of a {gpu}")])
    return gpu


def run_pin(args: argparse.Namespace) -> int:
    from primus_ext.errors import Problem, RecipeError
    from primus_ext.hardware import family_profiles, load_gpu
    from primus_ext.hardware.kernels import pin_measured, read_sweep, sweep_efficiencies

    path = Path(args.sweep)
    sweep = read_sweep(path)
    device = sweep["device"]
    gpu = load_gpu(_gpu_of(device, args.gpu))
    if not gpu.family:
        raise RecipeError(problems=[Problem(path="--gpu", value=gpu.name, message="profile has no GPU family",
                                            fix="state family: in the profile (its calibration is per family)")])
    found = sweep_efficiencies(sweep, gpu, tuple(args.pin), attention_tokens=args.attention_tokens,
                               attention_backend=args.attention_backend)
    family = family_profiles(gpu.family)
    print(f"sweep {path}: {device} (torch {sweep.get('torch', '?')}) -> family {gpu.family}: {', '.join(family)}")
    for e in found:
        stated = ", ".join(f"{name} {getattr(load_gpu(name).efficiency, e.name):.4g}"
                           + (" measured" if e.name in load_gpu(name).efficiency.measured else "")
                           for name in family)
        print(f"  {e.name:<10} {e.value:.4f}  {e.what}   (profiles now: {stated})")
    if not args.out:
        print("nothing written: pass --out DIR to write the profiles")
        return 0
    written = pin_measured(found, device=device, source=str(path), family=gpu.family, folder=Path(args.out))
    print("wrote " + ", ".join(str(p) for p in written))
    print("next: `primus-ext validate MEASUREMENTS.csv --archs ARCHS.csv --fit --write-profiles DIR` refits the "
          "other efficiencies around the pinned ones (with DIR on $PRIMUS_EXT_PROFILES, or the shipped folder)")
    return 0
