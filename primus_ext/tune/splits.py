"""The tuner's ``split`` axis: how the decoder layers go over the (PP, VPP) stages.

``default`` is the split the space always had: the recipe's own at its (PP, VPP), else Megatron's even
split when the layers divide, else a generated ``pipeline_model_parallel_layout``
(``balanced_layout``). The other candidates unload the first and last pipeline stages, which
also carry the embedding and the output layer + loss (megatron-core 0.16.1
``transformer_config.py`` ``__post_init__``, ``transformer_block.get_num_layers_to_build``):

* ``first<a>`` / ``last<b>`` / ``first<a>-last<b>``: ``decoder_first/last_pipeline_num_layers``, each
  0..k layers fewer than the even share, k derived from the model (``head_layers``);
* ``acc-emb`` / ``acc-loss`` / ``acc-both``: ``account_for_embedding/loss_in_pipeline_split`` (each
  counts as one layer);
* ``layout``: a generated layout weighting the output layer + loss by its cost in decoder layers.

Only candidates that ``stages.layout_problems`` accepts are kept, and only those whose busiest rank
carries less estimated compute than the default's (layer-equivalents, ``stage_loads``); at most
``MAX_UNEVEN`` of them, least busiest-rank load first. The axis has at most ``1 + MAX_UNEVEN`` values per
(PP, VPP), and one (``default``) when PP = 1. Pure functions of the model and the recipe's execution.
"""

from __future__ import annotations

import math
import re
from typing import Any

from primus_ext.model.macs import attention_core_macs, attention_linear_macs, dense_mlp_macs, logits_macs, moe_mlp_macs
from primus_ext.model.pipeline.registry import get_schedule
from primus_ext.model.stages import LAYOUT_FIELDS, layout_problems, pipeline_plan
from primus_ext.specs import ExecutionSpec, ModelSpec

DEFAULT = "default"
MAX_FEWER = 4
"""Cap on k, the layers the first or last stage may shed (a 128k vocabulary on a 4k-hidden model costs ~4
layers of a dense 8B: hidden*vocab against ~12 hidden^2)."""
MAX_UNEVEN = 4
"""Uneven candidates kept per (PP, VPP), best estimated busiest rank first: the exhaustive search's space
grows by at most (1 + MAX_UNEVEN)x, in practice far less (most candidates are illegal or no better)."""
ACCOUNT = {"acc-emb": (True, False), "acc-loss": (False, True), "acc-both": (True, True)}
_FIRST_LAST = re.compile(r"^(?:first(\d+))?-?(?:last(\d+))?$")


def layer_macs(model: ModelSpec, seq_length: int) -> float:
    """Mean multiply-adds per token of one decoder layer (``primus_ext.model.flops``)."""
    n = max(1, model.num_layers)
    mlp = (model.num_moe_layers * moe_mlp_macs(model) + model.num_dense_layers * dense_mlp_macs(model)) / n \
        if model.is_moe else dense_mlp_macs(model)
    return attention_linear_macs(model) + attention_core_macs(model, seq_length) + mlp


def head_layers(model: ModelSpec, seq_length: int) -> float:
    """The output layer's cost in decoder layers: its GEMM (hidden x vocab) over a layer's multiply-adds per
    token; both run forward and backward, so the ratio holds for the step (``flops.flops_breakdown``)."""
    return logits_macs(model) / max(1.0, layer_macs(model, seq_length))


def balanced_layout(model: ModelSpec, pp: int, vpp: int, *, head: float | None = None) -> str | None:
    """A ``pipeline_model_parallel_layout`` spreading the decoder layers over PP*VPP chunks.

    The embedding goes first in chunk 0; the MTP layers and the loss last in the final chunk, which
    counts the output layer + loss as one layer and each MTP layer as two (a full layer plus its own
    output head). Layers go one by one to the least loaded chunk (lowest index on ties), so chunk
    sizes differ by at most one layer-equivalent. None when there are fewer layers than chunks.
    ``head``: the output layer + loss in layer-equivalents instead (``splits.head_layers``; each MTP
    layer then counts ``1 + head``).
    """
    chunks = pp * vpp
    if model.num_layers < chunks - 1:
        return None
    load: list[float] = [0] * chunks
    load[-1] = 1 + 2 * model.mtp_num_layers if head is None else head + (1 + head) * model.mtp_num_layers
    counts = _least_loaded_fill(load, model.num_layers)
    parts = []
    for i, count in enumerate(counts):
        text = ("E" if i == 0 else "") + ("t" if count == 1 else f"t*{count}" if count else "")
        if i == chunks - 1:
            text += "m" * model.mtp_num_layers + "L"
        parts.append(text)
    return "|".join(parts)


def _least_loaded_fill(load: list[float], layers: int) -> list[int]:
    """Layers each chunk gets when ``layers`` go one by one to the least loaded chunk (lowest index on ties), from
    the loads ``load`` (updated). In rounds, not layer by layer (that was O(layers x chunks): 100 000 layers on
    25 candidate splits cost 87 CPU-s): the chunks at the lowest load take a layer each, round after round, until
    they reach the next load or too few layers are left for a whole round (the first of them, by index, take
    those)."""
    counts = [0] * len(load)
    left = layers
    while left:
        low = min(load)
        lowest = [c for c, x in enumerate(load) if x == low]
        above = [x for x in load if x != low]
        rounds = min(math.ceil(min(above) - low) if above else left, left // len(lowest))
        for c in lowest if rounds else lowest[:left]:
            step = rounds or 1
            load[c] += step
            counts[c] += step
        left -= rounds * len(lowest) if rounds else left
    return counts


def stage_loads(model: ModelSpec, execution: ExecutionSpec, head: float) -> list[float]:
    """Per pipeline rank, its compute in decoder-layer equivalents: its layers, ``head`` for the output
    layer, ``1 + head`` per MTP layer (a layer and its own output head); the embedding lookup has no GEMM
    and counts 0."""
    return [len(s.layers) + head * s.output + (1 + head) * s.mtp_layers for s in pipeline_plan(model, execution)]


def split_fields(model: ModelSpec, pp: int, vpp: int, name: str, head: float) -> dict[str, Any]:
    """Layout fields of a non-default candidate ``name`` (not legality-checked)."""
    fields: dict[str, Any] = {f: False if f.startswith("account_for") else None for f in LAYOUT_FIELDS}
    if name in ACCOUNT:
        fields["account_for_embedding_in_pipeline_split"], fields["account_for_loss_in_pipeline_split"] = \
            ACCOUNT[name]
        return fields
    if name == "layout":
        fields["pipeline_model_parallel_layout"] = balanced_layout(model, pp, vpp, head=head)
        return fields
    m = _FIRST_LAST.match(name)
    if not m or not any(m.groups()):
        raise ValueError(f"unknown split {name!r}")
    fields["decoder_first_pipeline_num_layers"] = int(m.group(1)) if m.group(1) else None
    fields["decoder_last_pipeline_num_layers"] = int(m.group(2)) if m.group(2) else None
    return fields


def _names(model: ModelSpec, pp: int, head: float) -> list[str]:
    share = math.ceil(model.num_layers / pp)
    k = min(MAX_FEWER, max(1, math.ceil(head)))
    names = []
    for a in range(k + 1):
        for b in range(k + 1):
            first, last = share - a if a else None, share - b if b else None
            if (a or b) and (first is None or first > 0) and (last is None or last > 0):
                names.append("-".join(x for x in (first and f"first{first}", last and f"last{last}") if x))
    return [*names, *ACCOUNT, "layout"]


def split_candidates(model: ModelSpec, base: ExecutionSpec, pp: int, vpp: int,
                     default: dict[str, Any], schedule: str | None = None) -> tuple[str, ...]:
    """``default`` plus the legal uneven candidates that unload the busiest rank (see the module doc). ``schedule``:
    a DeepSeek schedule places the stages itself (DualPipe: stage s and PP-1-s on rank s, both copies; DualPipeV:
    2*PP stages in a V, whose uneven first / last stages are not projected: generated layouts only)."""
    if pp == 1:
        return (DEFAULT,)
    head = head_layers(model, base.seq_length)
    placed = get_schedule(schedule) if schedule else None
    fixed = bool(placed and placed.fixed_chunks)
    stages = placed.stage_count(pp, placed.chunks_per_rank(vpp)) // pp if fixed else vpp  # type: ignore[union-attr]
    shape: dict[str, Any] = dict(pipeline_model_parallel_size=pp,
                                 virtual_pipeline_model_parallel_size=None if fixed or vpp <= 1 else vpp)
    if fixed:
        shape["pipeline_schedule"] = placed.name  # type: ignore[union-attr]
    own = ExecutionSpec(**shape, **default)
    if layout_problems(model, own):
        return (DEFAULT,)
    bar = max(stage_loads(model, own, head))
    scored = []
    names = ["layout"] if fixed and placed.chunk_placement == "v" else _names(model, pp, head)  # type: ignore[union-attr]
    for name in names:
        fields = split_fields(model, pp, stages, name, head)
        if fields == default or (name == "layout" and fields["pipeline_model_parallel_layout"] is None):
            continue
        candidate = ExecutionSpec(**shape, **fields)
        if layout_problems(model, candidate):
            continue
        busiest = max(stage_loads(model, candidate, head))
        if busiest < bar - 1e-9:
            scored.append((busiest, name))
    return (DEFAULT, *(name for _, name in sorted(scored)[:MAX_UNEVEN]))
