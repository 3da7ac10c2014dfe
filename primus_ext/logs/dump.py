"""The configuration dumps training logs print at start-up -> Megatron argument names (pure; ``read.py`` feeds it).

    dump = DumpReader()
    for line in lines: dump.feed(line)          # a line it used returns True
    dump.config                                  # {"num_layers": "16", "seq_length": "1024", "bf16": "True", ...}
    run_config(dump.config, dump.facts)          # the typed ``RunConfig``

Formats read (sources beside each):
- Megatron-LM ``_print_args`` (megatron/training/arguments.py): ``------------------------ arguments
  ------------------------`` then ``  name ........ value`` lines, then ``-------------------- end of arguments
  ---------------------``; Primus prints it through its logger (``arguments.py:1576``), the same lines.
- Megatron-LM ``validate_args``: ``using world size: 8, data-parallel size: 8, context-parallel size: 1, ...
  tensor-model-parallel size: 1, ... pipeline-model-parallel size: 1``.
- Megatron-Bridge ``ConfigContainer`` (megatron/bridge/training/config.py, printed as YAML): ``------- Task
  Configuration -------`` then top-level ``section:`` lines and two-space ``  key: value`` lines; the sections read
  are ``BRIDGE_KEYS``' (the trained sequence is ``dataset.sequence_length``: ``model.seq_length`` is the model's
  maximum).
- NeMo 2 ``Resolved Arguments`` (a Rich table: ``│ data │ MockDataModule(seq_length=128, ...`` ): the ``name=value``
  pairs of its value column (``NEMO_KEYS``); ``MegatronMixedPrecision(precision='bf16-mixed')``, ``Trainer(
  devices=..., num_nodes=...)``.
- megatron-core's ``setting number of microbatches to constant 64`` (num_microbatches_calculator.py), Primus's
  ``[Primus:Env] rank=0, world_size=8`` and Lightning's ``Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/8``.
"""

from __future__ import annotations

import re

from primus_ext.logs.lines import MAX_DIGITS
from primus_ext.logs.records import RunConfig

MAX_CONFIG = 10_000
"""Arguments kept of one log (Megatron prints ~800)."""
ARGS_START = re.compile(r"-{3,}\s*arguments\s*-{3,}")
ARGS_END = re.compile(r"-{3,}\s*end of arguments\s*-{3,}")
ARG = re.compile(r"(?:^|\s)([A-Za-z_][\w]*) \.{2,} ?(.*?)\s*$")
BRIDGE_START = re.compile(r"-{3,}\s*Task Configuration\s*-{3,}")
BRIDGE_SECTION = re.compile(r"^([a-z_]+):\s*(?:null)?\s*$")
BRIDGE_KEY = re.compile(r"^  ([a-z_][\w]*):\s*(\S.*?)?\s*$")
BRIDGE_KEYS: dict[tuple[str, str], str] = {
    **{("model", k): k for k in (
        "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups",
        "tensor_model_parallel_size", "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size",
        "context_parallel_size", "expert_model_parallel_size", "sequence_parallel")},
    ("model", "num_moe_experts"): "num_experts",
    ("dataset", "sequence_length"): "seq_length",
    ("train", "micro_batch_size"): "micro_batch_size", ("train", "global_batch_size"): "global_batch_size",
    ("train", "train_iters"): "train_iters", ("logger", "log_interval"): "log_interval",
    ("mixed_precision", "bf16"): "bf16", ("mixed_precision", "fp16"): "fp16", ("mixed_precision", "fp8"): "fp8",
    ("mixed_precision", "fp4"): "fp4",
}
"""(section, key) of Megatron-Bridge's ``ConfigContainer`` -> the Megatron argument it is."""
NEMO_ROW = re.compile(r"^\s*│[^│]*│(.*)│\s*$")
NEMO_PAIR = re.compile(r"\b([a-z_][\w]*)=('[^']*'|[^,()\s]+)")
NEMO_KEYS = {k: k for k in (
    "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups", "seq_length",
    "micro_batch_size", "global_batch_size", "tensor_model_parallel_size", "pipeline_model_parallel_size",
    "virtual_pipeline_model_parallel_size", "context_parallel_size", "expert_model_parallel_size", "fp8",
    "num_nodes", "devices", "precision")} | {"num_moe_experts": "num_experts"}
"""NeMo 2 ``name=value`` pairs read (the Megatron argument each is; ``precision``, ``devices``, ``num_nodes``
are turned into ``bf16`` / ``fp16`` and ``world_size`` by ``run_config``)."""
WORLD = re.compile(r"using world size: (\d+), data-parallel size: (\d+)")
MICROBATCHES = re.compile(r"setting number of microbatches to constant (\d+)")
PRIMUS_ENV = re.compile(r"\[Primus:Env\] rank=\d+, world_size=(\d+)")
LIGHTNING = re.compile(r"Initializing distributed: GLOBAL_RANK: \d+, MEMBER: \d+/(\d+)")


class DumpReader:
    """Reads the dumps of one log, line by line; ``config`` (Megatron names -> printed values, the first kept) and
    ``facts`` (``world_size``, ``data_parallel_size``, ``num_microbatches`` stated outside a dump)."""

    def __init__(self) -> None:
        self.config: dict[str, str] = {}
        self.facts: dict[str, int] = {}
        self.mode: str | None = None  # "megatron" | "bridge" inside a dump
        self.section = ""

    def _keep(self, name: str, value: str) -> None:
        if len(self.config) < MAX_CONFIG:
            self.config.setdefault(name, value.strip().strip("'\""))

    def feed(self, text: str) -> bool:
        """Read one line (ANSI codes removed); True when it belonged to a dump."""
        if self.mode == "megatron" or ("arguments" in text and ARGS_START.search(text)):
            return self._megatron(text)
        if self.mode == "bridge" or ("Task Configuration" in text and BRIDGE_START.search(text)):
            return self._bridge(text)
        if text.startswith(("│", "┃")) or text.lstrip().startswith("│"):
            return self._nemo(text)
        self._facts(text)
        return False

    def _megatron(self, text: str) -> bool:
        if self.mode is None:
            self.mode = "megatron"
            return True
        if "end of arguments" in text and ARGS_END.search(text):
            self.mode = None
            return True
        m = ARG.search(text)
        if m:
            self._keep(m.group(1), m.group(2))
        return True

    def _bridge(self, text: str) -> bool:
        if self.mode is None:
            self.mode, self.section = "bridge", ""
            return True
        if text.startswith("---"):  # its closing rule
            self.mode = None
            return True
        section = BRIDGE_SECTION.match(text)
        if section:
            self.section = section.group(1)
            return True
        if not text.startswith(("  ", "- ", "_target_:")):  # not YAML of the dump: it ended without its rule
            self.mode = None
            return False
        m = BRIDGE_KEY.match(text)
        if m and (self.section, m.group(1)) in BRIDGE_KEYS:
            self._keep(BRIDGE_KEYS[(self.section, m.group(1))], m.group(2) or "None")
        return True

    def _nemo(self, text: str) -> bool:
        row = NEMO_ROW.match(text)
        if not row:
            return False
        for name, value in NEMO_PAIR.findall(row.group(1)):
            if name in NEMO_KEYS:
                self._keep(NEMO_KEYS[name], value)
        return True

    def _facts(self, text: str) -> None:
        for key, pattern, names in FACTS:
            m = pattern.search(text) if key in text else None
            if m:
                for name, value in zip(names, m.groups(), strict=True):
                    if (number := _int(value)) is not None:
                        self.facts.setdefault(name, number)


FACTS = (("using world size", WORLD, ("world_size", "data_parallel_size")),
         ("number of microbatches", MICROBATCHES, ("num_microbatches",)),
         ("[Primus:Env]", PRIMUS_ENV, ("world_size",)), ("Initializing distributed", LIGHTNING, ("world_size",)))
"""(substring that must be in the line, pattern, the facts its groups give)."""


def _int(text: str | None) -> int | None:
    """``text`` as a count (at most ``MAX_DIGITS`` ASCII digits, quotes stripped), else ``None``: a 5 001-digit
    "number" is not one (``int()`` refuses past 4 300 digits, issue 56)."""
    text = (text or "").strip().strip("'\"")
    return int(text) if text.isascii() and text.isdigit() and len(text) <= MAX_DIGITS else None


def _on(text: str | None) -> bool:
    return (text or "None").strip().strip("'\"").lower() not in ("none", "null", "false", "0", "")


def precision_of(config: dict[str, str]) -> str | None:
    """The run's compute precision as its dump states it (megatron-core's order: ``fp4`` e2m1, ``fp8`` e4m3 /
    hybrid, ``bf16``, ``fp16``, else fp32; NeMo's ``precision='bf16-mixed'`` / ``'16-mixed'``), ``None`` when the
    dump has none of these arguments."""
    nemo = config.get("precision", "").lower()
    if not any(k in config for k in ("fp4", "fp8", "bf16", "fp16")) and not nemo:
        return None
    found = next((p for p in ("fp4", "fp8", "bf16", "fp16") if _on(config.get(p))), None)
    if found is not None:
        return found
    if "bf16" in nemo:
        return "bf16"
    return "fp16" if nemo.startswith("16") or "fp16" in nemo else "fp32"


def run_config(config: dict[str, str], facts: dict[str, int]) -> RunConfig:
    """The typed run configuration from a dump's arguments and the facts stated outside it; the data-parallel size
    and the world size each from the other (world = DP x TP x PP x CP) or from the global batch over micro-batch x
    micro-batches per step when the dump prints neither."""
    tp, pp, cp = (_int(config.get(f"{k}_parallel_size")) for k in ("tensor_model", "pipeline_model", "context"))
    ep = _int(config.get("expert_model_parallel_size"))
    mbs, gbs = _int(config.get("micro_batch_size")), _int(config.get("global_batch_size"))
    world = _int(config.get("world_size")) or facts.get("world_size")
    devices, nodes = _int(config.get("devices")), _int(config.get("num_nodes"))
    if world is None and devices is not None:
        world = devices * (nodes or 1)
    dp = _int(config.get("data_parallel_size")) or facts.get("data_parallel_size")
    model_parallel = (tp or 1) * (pp or 1) * (cp or 1)
    if dp is None and world is not None and world % model_parallel == 0:
        dp = world // model_parallel
    micro = facts.get("num_microbatches")
    if dp is None and gbs and mbs and micro and gbs % (mbs * micro) == 0:
        dp = gbs // (mbs * micro)
    if world is None and dp is not None and None not in (tp, pp):
        world = dp * model_parallel
    return RunConfig(num_layers=_int(config.get("num_layers")), hidden_size=_int(config.get("hidden_size")),
                     num_attention_heads=_int(config.get("num_attention_heads")),
                     ffn_hidden_size=_int(config.get("ffn_hidden_size")), precision=precision_of(config),
                     seq_length=_int(config.get("seq_length")), micro_batch_size=mbs, global_batch_size=gbs,
                     tensor_parallel=tp, pipeline_parallel=pp, context_parallel=cp, expert_parallel=ep,
                     data_parallel=dp, world_size=world)
