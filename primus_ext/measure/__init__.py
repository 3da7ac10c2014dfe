"""Measured layer costs: real megatron-core layers at per-rank shapes, timed, kept in a timing store.

    primus-ext bench recipes/llama3.1_8B-pretrain.yaml          # the CLI over all of this

Modules (import the one you need; only ``store`` and ``quiet`` are torch-free):

- ``shims``   CPU / no-TE workarounds for megatron-core, ``parallel_context`` (gloo or NCCL, any TP/EP)
- ``build``   ``build_layer(shape)`` -> the real module (TransformerBlock of one layer or one
              window-pattern period, embedding, output + loss) at per-rank sizes, or global sizes split
              by megatron on real ranks
- ``attention`` fused SDPA core attention for the local spec on a GPU without TE (windows, CP stand-in)
- ``grouped`` megatron's GroupedMLP on ``torch._grouped_mm`` for the local spec on a GPU without TE
- ``timing``  forward / backward medians and spread, recompute timed inside backward, wgrad split
- ``saved``   bytes saved for backward (unique storages), peak device memory
- ``single``  ``measure_one``: one shape in this process -> ``Measurement`` (failures recorded)
- ``runner``  ``measure_layer`` / ``measure_many``: per-layer failures recorded, in-node ranks spawned
- ``spawn``   multi-rank measurement (torch.multiprocessing)
- ``quiet``   megatron-core notes kept out of spawned ranks' stderr (``PYTHONWARNINGS``)
- ``fabric``  in-node collective sweep (all-reduce, all-gather, reduce-scatter, all-to-all, send/recv)
- ``scale``   default CPU scale from a FLOP budget
- ``store``   ``TimingStore``: SQLite cache, ``CostProvider``, JSON-lines export / import
"""
