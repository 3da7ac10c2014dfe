"""``--verify-run local``: train each candidate here with the built-in trainer, as ``primus-ext train --verify``.

    outcomes = run_local(folder, manifest, variants, iters=6, scale=0.0625, nproc=None, device="cpu", store=None)

Each variant is shrunk for this machine (``launcher.short_run.local_target``: its TP/PP/VPP/MBS kept, the model by
``scale``, DP from the local ranks), refused before any work when the memory model says it does not fit
(``check_fits``), projected on this machine and trained (``verify_short_run``). The run's per-iteration times are
written to ``candidate-N.log`` as Megatron-LM's ``training_log`` prints them, so the same log reader re-ranks local
and cluster runs; the manifest gets each run's local projection and shrinks. A candidate that cannot run here is
recorded as not run, with the reason, and the others go on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from primus_ext.launcher.verify_top.variants import write_manifest


def megatron_log_lines(step_times_s: Sequence[float], losses: Sequence[float], *, global_batch_size: int,
                       end: datetime) -> list[str]:
    """One line per iteration in the format of Megatron-LM's ``training_log`` (megatron/training/training.py:
    `` [time] iteration {:8d}/{:8d} | consumed samples: {:12d} | elapsed time per iteration (ms): {:.1f} |``
    ... ``global batch size: {:5d} | lm loss: {:.6E} | loss scale: 1.0 | number of skipped iterations: {:3d} |
    number of nan iterations: {:3d} |``); the time stamps count back from ``end`` by the measured step times."""
    iters = len(step_times_s)
    lines = []
    for i, step in enumerate(step_times_s, start=1):
        stamp = end - timedelta(seconds=sum(step_times_s[i:]))
        loss = f" lm loss: {losses[i - 1]:.6E} |" if i <= len(losses) else ""
        lines.append(f" [{stamp.strftime('%Y-%m-%d %H:%M:%S.%f')}] iteration {i:8d}/{iters:8d} |"
                     f" consumed samples: {i * global_batch_size:12d} |"
                     f" elapsed time per iteration (ms): {step * 1e3:.1f} |"
                     f" global batch size: {global_batch_size:5d} |{loss} loss scale: 1.0 |"
                     f" number of skipped iterations: {0:3d} | number of nan iterations: {0:3d} |")
    return lines


def _write_log(path: Path, target: Any, training: Any, variant: str) -> None:
    from primus_ext.files import atomic_write

    head = [f"primus-ext tune --verify-run local: {variant} on {target.nproc} x {target.device} local ranks with the "
            f"built-in trainer, model {target.model.name} (scale {target.scale:g}); iteration lines written from "
            "the run's measured step times"]
    head += [f"primus-ext shrink: {s}" for s in target.shrinks]
    # the trainer's own Megatron-format lines (TrainResult.log_lines) where this version of the trainer has them
    own = getattr(training, "log_lines", None)
    lines = own() if callable(own) else megatron_log_lines(
        training.step_times_s, training.losses, global_batch_size=target.execution.global_batch_size,
        end=datetime.now())
    atomic_write(path, "\n".join(head + lines) + "\n", backup=False)


def run_local(folder: Path, manifest: dict[str, Any], variants: Sequence[Any], *, iters: int, scale: float,
              nproc: int | None, device: str, store: str | None, say: Callable[[str], None] = lambda _: None,
              on_step: Callable[[int, int, float], None] | None = None) -> dict[str, Any]:
    """Run every variant (``variants[i]`` is ``manifest["candidates"][i]``'s loaded recipe) here, write its log,
    and record the local projection in the manifest (rewritten); returns the manifest. ``nproc``: local ranks of
    every run (default: each candidate's TP x PP x CP, i.e. DP 1)."""
    from primus_ext.errors import PrimusExtError
    from primus_ext.launcher.short_run import check_fits, local_target, verify_short_run

    for entry, variant in zip(manifest["candidates"], variants, strict=True):
        e = variant.execution
        ranks = nproc or max(1, e.tp * e.pp * e.cp)
        try:
            target = local_target(variant, scale=scale, nproc=ranks, device=device)
            check_fits(target)
            say(f"{entry['name']}: {entry['summary']} on {ranks} x {device}, {iters} iterations")
            verify = verify_short_run(target, iters=iters, store=store, notice=say, on_step=on_step, log=False)
        except PrimusExtError as err:
            entry["local"] = {"not_run": " ".join(str(err).split())}
            say(f"{entry['name']}: not run here: {entry['local']['not_run']}")
            continue
        _write_log(folder / entry["log"], target, verify.training, entry["file"])
        t = verify.training
        entry["local"] = {"projected_step_s": verify.projection.step_time_s, "measured_step_s": t.median_step_time_s,
                          "measured_spread": t.spread, "world_size": t.world_size, "device": t.device,
                          "fabric": verify.fabric, "shrinks": [str(s) for s in target.shrinks]}
        say(f"{entry['name']}: measured {t.median_step_time_s * 1e3:.1f} ms/step, projected "
            f"{verify.projection.step_time_s * 1e3:.1f} ms/step for this run here")
    manifest["local"] = {"iters": iters, "scale": scale, "nproc": nproc, "device": device}
    write_manifest(folder, manifest)
    return manifest
