"""``model_archs.csv`` rows -> ``ModelSpec`` (or the reason a row cannot be used).

Column layout of ``shared/validation/model_archs.csv``: name, num_layers, hidden, ffn_hidden,
num_heads, num_kv_heads ("MLA" for DeepSeek-style attention), vocab, num_experts, topk,
moe_ffn_hidden, shared_experts (``"1 (2048)"`` = count (total size)), first_k_dense, mla(yes/no),
notes. Details the columns lack (MLA ranks, kv_channels, activation, sliding window, group-limited
routing) are read from the notes text with explicit patterns; anything assumed is listed in
``ArchRow.assumptions``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from primus_ext.specs import ModelSpec
from primus_ext.validate.csvio import read_rows

MEGATRON_GPT_FFN_MULT = 4
"""Megatron-LM's GPT default ffn_hidden_size = 4 * hidden (megatron/training/arguments.py), used for
the weak-scaling rows whose table does not state it."""


@dataclass(frozen=True, kw_only=True)
class ArchRow:
    name: str
    model: ModelSpec | None
    skipped_reason: str = ""
    assumptions: tuple[str, ...] = ()


def _int(text: str) -> int | None:
    match = re.match(r"\s*(\d+)", text or "")
    return int(match.group(1)) if match else None


def _note_int(notes: str, key: str) -> int | None:
    match = re.search(rf"{key}\s*[=:]?\s*(\d+)", notes)
    return int(match.group(1)) if match else None


def _group_routing(notes: str) -> tuple[int | None, int | None]:
    """``"group-limited (8 groups, top-4 groups)"`` -> (8, 4): megatron-core's ``moe_router_num_groups``
    / ``moe_router_group_topk`` (DeepSeek-V3 node-limited routing, arXiv:2412.19437 sec. 2.1.2)."""
    match = re.search(r"group-limited\s*\(\s*(\d+)\s+groups?\s*,\s*top-(\d+)\s+groups?\s*\)", notes, re.IGNORECASE)
    return (int(match.group(1)), int(match.group(2))) if match else (None, None)


def _activation(notes: str) -> str:
    lowered = notes.lower()
    if "squared-relu" in lowered or "squared relu" in lowered:
        return "squared_relu"
    if "gelu" in lowered:
        return "gelu"
    return "swiglu"


def parse_arch(row: dict[str, str]) -> ArchRow:
    """One CSV row -> ``ArchRow`` (model or skip reason)."""
    name = row["name"].strip()
    notes = row.get("notes", "") or ""
    layers, hidden, heads = _int(row["num_layers"]), _int(row["hidden"]), _int(row["num_heads"])
    if not (layers and hidden and heads):
        return ArchRow(name=name, model=None, skipped_reason=f"architecture of {name} not given in model_archs.csv")
    assumptions: list[str] = []
    hybrid = _hybrid_pattern(notes)
    if hybrid is None and ("mamba" in notes.lower() or ("hybrid" in notes.lower() and "Nemotron" in name)):
        return ArchRow(name=name, model=None, skipped_reason=f"{name} is a hybrid Mamba model whose layer pattern "
                       "the notes do not give (`pattern M*-E...`)")
    ffn = _int(row["ffn_hidden"])
    if ffn is None:
        ffn = MEGATRON_GPT_FFN_MULT * hidden
        assumptions.append(f"ffn_hidden_size = {MEGATRON_GPT_FFN_MULT}*hidden (not stated)")
    mla = row.get("mla(yes/no)", "").strip().lower() == "yes"
    kv_heads = _int(row["num_kv_heads"])
    if kv_heads is None:
        kv_heads = heads
        if not mla:
            assumptions.append("MHA assumed (num_kv_heads not stated)")
    vocab = _int(row["vocab"])
    if vocab is None and hybrid:
        vocab = NEMOTRON_H_VOCAB
        assumptions.append(f"vocab {NEMOTRON_H_VOCAB} (Nemotron-H tokenizer; not stated)")
    if vocab is None:
        return ArchRow(name=name, model=None, skipped_reason=f"vocabulary of {name} not given")
    experts = _int(row["num_experts"])
    first_k = _int(row["first_k_dense"]) or 0
    shared = 0
    shared_text = row.get("shared_experts", "") or ""
    total = re.search(r"\((\d+)", shared_text)
    if total:
        shared = int(total.group(1))
    elif _int(shared_text):
        shared = (_int(shared_text) or 0) * (_int(row["moe_ffn_hidden"]) or ffn)
    kv_channels = _note_int(notes, "kv_channels") or (
        _note_int(notes, "qk_head_dim") or 128 if mla else hidden // heads
    )
    activation = _activation(notes)
    if name.startswith("MegatronLM-GPT"):
        activation = "gelu"
        assumptions.append("GeLU MLP, LayerNorm (Megatron-LM GPT defaults)")
    elif name.startswith("Nemotron") and activation == "swiglu":
        activation = "squared_relu"
        assumptions.append("squared-ReLU MLP (NeMo Nemotron configs)")
    window_match = re.search(r"sliding window \((\d+),\s*(\d+)\)", notes)
    window = (int(window_match.group(1)), int(window_match.group(2))) if window_match else None
    num_groups, group_topk = _group_routing(notes) if experts else (None, None)
    model = ModelSpec(
        name=name,
        num_layers=layers,
        hidden_size=hidden,
        ffn_hidden_size=ffn,
        num_attention_heads=heads,
        num_query_groups=kv_heads,
        kv_channels=kv_channels,
        vocab_size=vocab,
        activation=activation,  # type: ignore[arg-type]
        normalization="LayerNorm" if activation == "gelu" else "RMSNorm",
        qk_layernorm="qk_layernorm" in notes,
        window_size=window,
        window_attn_skip_freq=_note_int(notes, "window_attn_skip_freq") or 0,
        num_experts=experts,
        moe_router_topk=_int(row["topk"]) or 2,
        moe_ffn_hidden_size=_int(row["moe_ffn_hidden"]),
        moe_shared_expert_intermediate_size=shared or None,
        moe_layer_pattern=(tuple(c == "E" for c in hybrid) if hybrid else
                           tuple([False] * first_k + [True] * (layers - first_k)) if experts else ()),
        moe_router_num_groups=num_groups,
        moe_router_group_topk=group_topk,
        moe_latent_size=_note_int(notes, "moe_latent_size") if experts else None,
        mtp_use_repeated_layer="mtp_use_repeated_layer" in notes,
        multi_latent_attention=mla,
        q_lora_rank=_note_int(notes, "q_lora_rank") if mla else None,
        kv_lora_rank=_note_int(notes, "kv_lora_rank") or 512,
        qk_head_dim=_note_int(notes, "qk_head_dim") or 128,
        qk_pos_emb_head_dim=_note_int(notes, "qk_pos_emb_head_dim") or 64,
        v_head_dim=_note_int(notes, "v_head_dim") or 128,
    )
    if hybrid:
        model = _hybrid_model(model, hybrid, notes, assumptions)
        if isinstance(model, str):
            return ArchRow(name=name, model=None, skipped_reason=model)
    return ArchRow(name=name, model=model, assumptions=tuple(assumptions))


NEMOTRON_H_VOCAB = 131072
"""The Nemotron-H tokenizer's vocabulary: ``--padded-vocab-size 131072`` in Megatron-LM
examples/post_training/modelopt/conf/nvidia/NVIDIA-Nemotron-Nano-9B-v2.sh @d98e8a64 (Nemotron-3-Nano's row
states none; with it the model holds 31.58e9 parameters, the "30B-A3B" of its name)."""


def _hybrid_pattern(notes: str) -> str | None:
    """``"pattern MEMEM*E..."`` in the notes -> the hybrid layer pattern (megatron-core symbols M * - E; ``/*E/*E``
    after it: one MTP depth's layers per ``/``, Megatron-LM's ``parse_hybrid_pattern``)."""
    match = re.search(r"pattern\s+([ME*\-/]{2,})", notes)
    return match.group(1) if match else None


def _hybrid_model(model: ModelSpec, pattern: str, notes: str, assumptions: list[str]) -> ModelSpec | str:
    """``model`` as a hybrid Mamba model (``model.hybrid``), or why it cannot be one."""

    from primus_ext.model import hybrid
    from primus_ext.model.layers import allocate_layers

    pattern, *depths = pattern.split("/")
    if any(part != depths[0] for part in depths) or not set("".join(depths)) <= set(pattern):
        return f"{model.name}: MTP patterns {depths} differ or hold layers the decoder pattern lacks"
    try:
        allocate_layers(model.num_layers, 0.0, 0.0, pattern)
        head_dim = _note_int(notes, "mamba_head_dim") or hybrid.MAMBA_HEAD_DIM
        heads = hybrid.mamba_num_heads(model.hidden_size, head_dim, _note_int(notes, "mamba_num_heads"))
    except hybrid.HybridPatternError as err:
        return f"{model.name}: {err}"
    groups = _note_int(notes, "mamba_num_groups") or hybrid.MAMBA_NUM_GROUPS
    state = _note_int(notes, "mamba_state_dim") or hybrid.MAMBA_STATE_DIM
    if not (_note_int(notes, "mamba_num_groups") and _note_int(notes, "mamba_state_dim")):
        assumptions.append(f"Mamba groups {groups}, state {state}, head dim {head_dim} where not stated "
                           "(megatron-core TransformerConfig defaults)")
    if depths:
        assumptions.append(f"{len(depths)} MTP depths of {depths[0]}" + (
            ", one layer repeated at each (mtp_use_repeated_layer)" if model.mtp_use_repeated_layer else ""))
    return replace(model, hybrid_layer_pattern=pattern, mamba_num_heads=heads, mamba_head_dim=head_dim,
                   mamba_num_groups=groups, mamba_state_dim=state, position_embedding_type="none",
                   mtp_num_layers=len(depths), mtp_layer_pattern=depths[0] if depths else "",
                   moe_layer_pattern=tuple(c == "E" for c in pattern) if model.num_experts else ())


REQUIRED_ARCH_COLUMNS = ("name", "num_layers", "hidden", "ffn_hidden", "num_heads", "num_kv_heads", "vocab",
                         "num_experts", "topk", "moe_ffn_hidden", "shared_experts", "first_k_dense")


CITED_ARCHS = Path(__file__).with_name("archs_cited.csv")
"""Architectures primus-ext found in upstream sources for models ``model_archs.csv`` gives none for, each row's
source in its notes (same layout): used only for a model the given file lacks or leaves without an architecture."""


def read_archs(path: str | Path, cited: str | Path | None = CITED_ARCHS) -> dict[str, ArchRow]:
    """All rows of an archs CSV keyed by model name, with ``cited``'s rows for the models it gives no architecture
    (``CITED_ARCHS``; ``None``: the file alone). Raises ``RecipeError`` on a wrong layout."""
    archs = {name: parse_arch(row) for name, row in _rows(path).items()}
    for name, row in (_rows(cited) if cited else {}).items():
        if name not in archs or (archs[name].model is None and "not given" in archs[name].skipped_reason):
            found = parse_arch(row)
            archs[name] = replace(found, assumptions=(
                f"architecture from primus-ext's {Path(cited).name} (the archs file gives none)",  # type: ignore[arg-type]
                *found.assumptions))
    return archs


def _rows(path: str | Path) -> dict[str, dict[str, str]]:
    rows = {row["name"].strip(): row for row in read_rows(path, REQUIRED_ARCH_COLUMNS, "model_archs.csv")}
    for row in rows.values():
        # "as GPT-OSS-120B otherwise": the notes inherit the named model's notes
        ref = re.search(r"as ([\w.\-]+) otherwise", row.get("notes", "") or "")
        if ref and ref.group(1) in rows:
            row["notes"] = (row["notes"] or "") + "; " + (rows[ref.group(1)].get("notes", "") or "")
    return rows
