"""``model_archs.csv`` rows -> the recipe keys of each architecture, resolved as a user's recipe (or the reason a row
cannot be used).

Column layout of ``shared/validation/model_archs.csv``: name, num_layers, hidden, ffn_hidden,
num_heads, num_kv_heads ("MLA" for DeepSeek-style attention), vocab, num_experts, topk,
moe_ffn_hidden, shared_experts (``"1 (2048)"`` = count (total size)), first_k_dense, mla(yes/no),
notes. Details the columns lack (MLA ranks, kv_channels, activation, sliding window, group-limited
routing) are read from the notes text with explicit patterns; anything assumed is listed in
``ArchRow.assumptions``. The keys go through ``recipe.resolve`` (the path a user's recipe takes).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from primus_ext.specs import ModelSpec
from primus_ext.validate.csvio import leading_count, read_rows

MEGATRON_GPT_FFN_MULT = 4
"""Megatron-LM's GPT default ffn_hidden_size = 4 * hidden (megatron/training/arguments.py), used for
the weak-scaling rows whose table does not state it."""


@dataclass(frozen=True, kw_only=True)
class ArchRow:
    """One architecture row as the recipe keys a user would write for it, and the model they resolve to."""

    name: str
    keys: Mapping[str, Any] | None = None
    """The row's architecture as Megatron / Primus recipe keys (``None`` when skipped)."""
    model: ModelSpec | None = None
    """``keys`` through the recipe resolve (``recipe.resolve.resolve_model_keys``)."""
    skipped_reason: str = ""
    assumptions: tuple[str, ...] = ()


def _int(text: str) -> int | None:
    """The count a cell starts with, ``None`` when none or past ``csvio.MAX_DIGITS`` digits (no architecture has
    one; ``int()`` refuses past 4 300, issue 56)."""
    return leading_count(text)


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


ACTIVATION_KEYS = {"swiglu": {"swiglu": True}, "squared_relu": {"squared_relu": True}, "gelu": {}}
"""Activation -> the Megatron arguments that select it (none: GeLU, Megatron's default)."""


def parse_arch(row: dict[str, str]) -> ArchRow:
    """One CSV row -> ``ArchRow``: its recipe keys and the model they resolve to, or the skip reason."""
    name = row["name"].strip()
    notes = row.get("notes", "") or ""
    layers, hidden, heads = _int(row["num_layers"]), _int(row["hidden"]), _int(row["num_heads"])
    if not (layers and hidden and heads):
        return ArchRow(name=name, skipped_reason=f"architecture of {name} not given in model_archs.csv")
    assumptions: list[str] = []
    hybrid = _hybrid_pattern(notes)
    if hybrid is None and ("mamba" in notes.lower() or ("hybrid" in notes.lower() and "Nemotron" in name)):
        return ArchRow(name=name, skipped_reason=f"{name} is a hybrid Mamba model whose layer pattern "
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
        return ArchRow(name=name, skipped_reason=f"vocabulary of {name} not given")
    activation = _activation(notes)
    if name.startswith("MegatronLM-GPT"):
        activation = "gelu"
        assumptions.append("GeLU MLP, LayerNorm (Megatron-LM GPT defaults)")
    elif name.startswith("Nemotron") and activation == "swiglu":
        activation = "squared_relu"
        assumptions.append("squared-ReLU MLP (NeMo Nemotron configs)")
    window = re.search(r"sliding window \((\d+),\s*(\d+)\)", notes)
    keys: dict[str, Any] = {
        "num_layers": layers, "hidden_size": hidden, "ffn_hidden_size": ffn, "num_attention_heads": heads,
        "group_query_attention": kv_heads != heads and not mla, "num_query_groups": kv_heads,
        "kv_channels": _note_int(notes, "kv_channels") or (_note_int(notes, "qk_head_dim") or 128 if mla
                                                           else hidden // heads),
        "vocab_size": vocab, **ACTIVATION_KEYS[activation],
        "normalization": "LayerNorm" if activation == "gelu" else "RMSNorm",
        # what the rows' frameworks build and the table does not state: bias-free linears, untied embeddings, RoPE
        # (the NeMo / Megatron-Bridge providers the notes cite)
        "add_bias_linear": False, "untie_embeddings_and_output_weights": True, "position_embedding_type": "rope",
        "qk_layernorm": "qk_layernorm" in notes,
        "window_size": [int(window.group(1)), int(window.group(2))] if window else None,
        "window_attn_skip_freq": _note_int(notes, "window_attn_skip_freq"),
        "mtp_use_repeated_layer": "mtp_use_repeated_layer" in notes,
        **_moe_keys(row, notes, layers, ffn), **_mla_keys(notes, mla),
    }
    if hybrid:
        found = _hybrid_keys(name, hybrid, notes, bool(keys.get("mtp_use_repeated_layer")))
        if isinstance(found, str):
            return ArchRow(name=name, skipped_reason=found)
        keys.update(found[0])
        assumptions += found[1]
    return _resolved(name, keys, tuple(assumptions))


def _resolved(name: str, keys: dict[str, Any], assumptions: tuple[str, ...]) -> ArchRow:
    """The row whose keys resolve through the recipe resolve, or skipped with its first problem."""
    from primus_ext.recipe.resolve import resolve_model_keys

    keys = {k: v for k, v in keys.items() if v is not None}
    model, problems = resolve_model_keys(keys, name=name)
    if problems:
        return ArchRow(name=name, skipped_reason=f"{name}: {problems[0].path}: {problems[0].message}")
    return ArchRow(name=name, keys=keys, model=model, assumptions=assumptions)


def _moe_keys(row: dict[str, str], notes: str, layers: int, ffn: int) -> dict[str, Any]:
    """The MoE keys of a row (none for a dense model): first_k_dense dense layers, then MoE layers."""
    experts = _int(row["num_experts"])
    if not experts:
        return {}
    shared = 0
    shared_text = row.get("shared_experts", "") or ""
    total = re.search(r"\((\d+)", shared_text)
    if total:
        shared = int(total.group(1))
    elif _int(shared_text):
        shared = (_int(shared_text) or 0) * (_int(row["moe_ffn_hidden"]) or ffn)
    first_k = _int(row["first_k_dense"]) or 0
    num_groups, group_topk = _group_routing(notes)
    return {"num_experts": experts, "moe_router_topk": _int(row["topk"]) or 2,
            "moe_ffn_hidden_size": _int(row["moe_ffn_hidden"]), "moe_shared_expert_intermediate_size": shared or None,
            "moe_layer_freq": 1, "first_k_dense_replace": first_k or None,
            "moe_router_num_groups": num_groups, "moe_router_group_topk": group_topk,
            "moe_latent_size": _note_int(notes, "moe_latent_size")}


def _mla_keys(notes: str, mla: bool) -> dict[str, Any]:
    """Multi-latent attention's ranks and head sizes from the notes (DeepSeek-V3's where not stated); none for a
    model without MLA (its recipe sets none)."""
    if not mla:
        return {}
    return {"multi_latent_attention": True, "q_lora_rank": _note_int(notes, "q_lora_rank") if mla else None,
            "kv_lora_rank": _note_int(notes, "kv_lora_rank") or 512,
            "qk_head_dim": _note_int(notes, "qk_head_dim") or 128,
            "qk_pos_emb_head_dim": _note_int(notes, "qk_pos_emb_head_dim") or 64,
            "v_head_dim": _note_int(notes, "v_head_dim") or 128}


NEMOTRON_H_VOCAB = 131072
"""The Nemotron-H tokenizer's vocabulary: ``--padded-vocab-size 131072`` in Megatron-LM
examples/post_training/modelopt/conf/nvidia/NVIDIA-Nemotron-Nano-9B-v2.sh @d98e8a64 (Nemotron-3-Nano's row
states none; with it the model holds 31.58e9 parameters, the "30B-A3B" of its name)."""


def _hybrid_pattern(notes: str) -> str | None:
    """``"pattern MEMEM*E..."`` in the notes -> the hybrid layer pattern (megatron-core symbols M * - E; ``/*E/*E``
    after it: one MTP depth's layers per ``/``, Megatron-LM's ``parse_hybrid_pattern``)."""
    match = re.search(r"pattern\s+([ME*\-/]{2,})", notes)
    return match.group(1) if match else None


def _hybrid_keys(name: str, pattern: str, notes: str, repeated: bool) -> tuple[dict[str, Any], list[str]] | str:
    """The hybrid Mamba keys of a row (``model_type: mamba``, megatron-core's ``MambaModel``) and what they assume,
    or why its MTP patterns cannot be one."""
    from primus_ext.model import hybrid

    _, *depths = pattern.split("/")
    if depths and any(part != depths[0] for part in depths):
        return f"{name}: MTP patterns {depths} differ"
    keys = {"model_type": "mamba", "is_hybrid_model": True, "hybrid_override_pattern": pattern,
            "position_embedding_type": "none", "mtp_num_layers": len(depths) or None,
            **{key: _note_int(notes, key) for key in ("mamba_head_dim", "mamba_num_heads", "mamba_num_groups",
                                                      "mamba_state_dim")}}
    assumptions = []
    if not (keys["mamba_num_groups"] and keys["mamba_state_dim"]):
        assumptions.append(f"Mamba groups {keys['mamba_num_groups'] or hybrid.MAMBA_NUM_GROUPS}, state "
                           f"{keys['mamba_state_dim'] or hybrid.MAMBA_STATE_DIM}, head dim "
                           f"{keys['mamba_head_dim'] or hybrid.MAMBA_HEAD_DIM} where not stated "
                           "(megatron-core TransformerConfig defaults)")
    if depths:
        assumptions.append(f"{len(depths)} MTP depths of {depths[0]}" + (
            ", one layer repeated at each (mtp_use_repeated_layer)" if repeated else ""))
    return keys, assumptions


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
