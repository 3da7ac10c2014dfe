"""Bytes a layer saves for backward, and peak device memory of one iteration.

Usage::

    nbytes = saved_bytes(built)          # one forward under saved_tensors_hooks, then backward
    peak = peak_bytes(built)             # GPU only (None on CPU)

Counting rule: every tensor autograd packs is mapped to its storage; each distinct storage counts
once with the storage's ``nbytes`` read *after* the forward (a view keeps its whole storage alive;
megatron's ``CheckpointWithoutOutput`` shrinks recomputed outputs to 0 bytes after packing, which
reading late accounts for: they are freed before backward and re-materialised there). Storages are
told apart by identity (the ``StorageImpl``, held until counted), not by their address at pack time:
a storage shrunk to 0 returns its memory to the allocator, which hands the address to a later saved
tensor. After the forward, live storages at one address (distinct storages aliasing one memory, e.g.
through DLPack) count once. Excluded: parameters (they are weights, not activations) and the
non-differentiable inputs (causal mask, rotary table, token ids, labels), which a model holds once
per micro-batch, not per layer, and module buffers (model state, e.g. the CP emulation's mask).
The layer's differentiable input (the previous layer's output) counts: the layer keeps it, no
other layer does.
"""

from __future__ import annotations

import torch

from primus_ext.measure.build import BuiltLayer
from primus_ext.measure.timing import run_backward


def _storage_key(t: torch.Tensor) -> int:
    """Identity of ``t``'s storage (shared by its views), unique while the storage is held."""
    return t.untyped_storage()._cdata


def saved_bytes(built: BuiltLayer) -> int:
    """Unique-storage bytes saved for backward by one forward of ``built`` (rules above)."""
    module = built.module
    inputs = built.make_inputs()
    excluded = {_storage_key(p) for p in module.parameters()}
    excluded |= {_storage_key(t) for t in inputs.values()
                 if isinstance(t, torch.Tensor) and not t.requires_grad}
    seen: dict[int, tuple[torch.Tensor, torch.UntypedStorage]] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        key = _storage_key(t)
        if key not in excluded and key not in seen:
            seen[key] = (t, t.untyped_storage())  # holding the storage pins its identity: no other takes the key
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = module(**inputs)
    out = out[0] if isinstance(out, tuple) else out
    buffers = {_storage_key(b) for b in module.buffers()}  # after the forward: some are built lazily
    held: dict[int, int] = {}  # address -> bytes of the live storages
    for key, (t, _) in seen.items():
        storage = t.untyped_storage()  # what the saved tensor holds now: 0 bytes once a recompute freed it
        if key not in buffers and storage.nbytes():
            held[storage.data_ptr()] = max(held.get(storage.data_ptr(), 0), storage.nbytes())
    total = sum(held.values())
    seen.clear()
    run_backward(out, torch.ones_like(out))
    for p in module.parameters():
        p.grad = None
    return int(total)


def peak_bytes(built: BuiltLayer) -> int | None:
    """Peak allocated device bytes above the pre-forward level during one fwd+bwd (CUDA only)."""
    if built.device.type != "cuda":
        return None
    module = built.module
    inputs = built.make_inputs()
    torch.cuda.synchronize(built.device)
    base = torch.cuda.memory_allocated(built.device)
    torch.cuda.reset_peak_memory_stats(built.device)
    out = module(**inputs)
    out = out[0] if isinstance(out, tuple) else out
    run_backward(out, torch.ones_like(out))
    torch.cuda.synchronize(built.device)
    peak = torch.cuda.max_memory_allocated(built.device) - base
    for p in module.parameters():
        p.grad = None
    return int(peak)
