"""Multi-fidelity tuning: short real runs of the tuner's K best configurations, re-ranked by measured step time.

    primus-ext tune RECIPE --verify-top 3                               # write RECIPE-verify-top/ and stop
    primus-ext tune RECIPE --verify-top 3 --verify-run local --verify-scale 0.0625   # also run them here
    primus-ext tune RECIPE --verify-top 3 --verify-dir DIR --resume-verify          # re-rank DIR's logs

    from primus_ext.launcher.verify_top import rerank
    result = rerank("llama-verify-top")        # VerifyTopResult: measured vs projected ranks, regret, Spearman
    print(format_verify_top(result)); result.to_dict()

After a search, the K best projected configurations become short-run variants of the recipe in DIR
(``candidate-1.yaml`` ...: the tuned keys written as ``--out`` writes them, plus ``train_iters`` (default 20),
``log_interval: 1``, ``eval_iters: 0``, ``save: null`` and ``log_throughput: true``), a ``manifest.json`` (each
candidate's configuration, projected step time and tok/s/GPU, projected rank, file and launch commands, and the
search's ``tune`` document) and ``launch.sh`` (``launch.sh primus`` or ``launch.sh megatron``: every candidate in
turn, each writing ``candidate-N.log``; the Megatron-LM lines carry only flags Megatron-LM's parser accepts at every
supported release, ``launcher.megatron_cli``, and a comment names the recipe keys left out and why). Run them on
the target cluster, then ``--resume-verify`` (or
``primus-ext calibrate DIR``) reads the logs back (``primus_ext.logs.read_log``), ranks the candidates by
measured step time and reports the projection's selection regret (measured step of the projection's #1 over the
best measured, minus one) and, from three runs, the Spearman rank correlation. A candidate without a readable
log is listed as not run. ``--verify-run local`` runs each variant here instead, with the built-in trainer at
reduced scale exactly as ``primus-ext train --verify`` does, writes the Megatron-format log of each run and
compares against the projection of that same reduced run on this machine (not the target projection: a local
run checks how the projection orders the configurations it can run here).
"""

from __future__ import annotations

from primus_ext.launcher.verify_top.rerank import CandidateOutcome, VerifyTopResult, format_verify_top, rerank
from primus_ext.launcher.verify_top.variants import (
    DEFAULT_ITERS,
    MANIFEST,
    Candidate,
    check_folder,
    default_folder,
    pick_candidates,
    short_run_changes,
    write_variants,
)

__all__ = ["DEFAULT_ITERS", "MANIFEST", "Candidate", "CandidateOutcome", "VerifyTopResult", "check_folder",
           "default_folder", "format_verify_top", "pick_candidates", "rerank", "short_run_changes",
           "write_variants"]
