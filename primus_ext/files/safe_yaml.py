"""Safe YAML with its cost decided before the work: every user YAML (recipes, presets, suites, values on the
command line and in templates) is read here.

    >>> from primus_ext.files.safe_yaml import load
    >>> load("a: 1")
    {'a': 1}

Three bounds, checked in order, each before the next step's work: the text's size (``MAX_TEXT_BYTES``), its
parse events (``MAX_EVENTS``: counted while libyaml parses, stopped at the bound, so a 3.8 MB list costs a
fraction of a second instead of 38 s of PyYAML's pure-Python constructor), and the size of the document once
its aliases are expanded (``MAX_EXPANDED_NODES``: counted on the composed node graph, each shared node once,
so nine levels of ten aliases are refused in microseconds instead of building a 10^9-element value later).
A bound crossed raises ``YAMLTooLarge`` (a ``yaml.YAMLError``) naming it. Safe-loading only: no tags that
construct Python objects.
"""

from __future__ import annotations

from typing import Any

import yaml

from primus_ext.errors import cut

MAX_TEXT_BYTES = 4 * 1024 * 1024
"""4 MiB: the largest Primus YAML (fd1eeab) is ~20 kB."""
MAX_EVENTS = 100_000
"""Parse events (scalars, mapping / sequence starts and ends, aliases): Primus's largest YAML,
``configs/modules/megatron/trainer_base.yaml``, has 786."""
MAX_DEPTH = 100
"""Nesting levels of lists and mappings (Primus's YAMLs nest 4 deep)."""
MAX_EXPANDED_NODES = 100_000
"""Nodes of the document with every alias expanded: what any later walk over the value (merging, validating,
printing) would visit."""

_Base: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when PyYAML was built with it


class YAMLTooLarge(yaml.YAMLError):
    """A YAML text over one of this module's bounds."""


class YAMLValueError(yaml.YAMLError):
    """A scalar the YAML resolver accepted but cannot be built (a bad timestamp, an absurd tagged number)."""


class _Loader(_Base):
    """Safe loader that records duplicate keys (Primus, as PyYAML, keeps the last value silently; we say so)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[str] = []

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                key = key_node.value
                if key in seen:
                    self.duplicates.append(f"`{cut(key)}` (line {key_node.start_mark.line + 1})")
                seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_checked_timestamp(self, node: yaml.ScalarNode) -> Any:
        """PyYAML's timestamp, or a ``ConstructorError`` naming the value (its own constructor fails with an
        AttributeError on ``!!timestamp 99999-01-01``, a ValueError on ``2024-13-45``)."""
        try:
            return super().construct_yaml_timestamp(node)
        except (AttributeError, ValueError, OverflowError):
            raise yaml.constructor.ConstructorError(
                None, None, f"{cut(node.value)!s} is not a date YAML can build (YYYY-MM-DD, years 1-9999); quote it "
                "to keep it as text", node.start_mark) from None


_Loader.add_constructor("tag:yaml.org,2002:timestamp", _Loader.construct_checked_timestamp)


def _depth_refusal(err: yaml.YAMLError) -> YAMLTooLarge | None:
    """PyYAML >= 6.0.3's scanner has a nesting bound of its own (1 000 flow levels) that it may reach before this
    module's event count does (it scans a flow collection ahead of the events): the same refusal, in our words."""
    problem = getattr(err, "problem", None) or str(err)
    return YAMLTooLarge(f"nested more than {MAX_DEPTH} levels deep") if "nesting depth" in problem else None


def _count_events(text: str) -> None:
    try:
        _walk_events(text)
    except YAMLTooLarge:
        raise
    except yaml.YAMLError as err:
        refusal = _depth_refusal(err)
        if refusal is None:
            raise
        raise refusal from None


def _walk_events(text: str) -> None:
    depth = 0
    for count, event in enumerate(yaml.parse(text, Loader=_Base), start=1):
        if count > MAX_EVENTS:
            raise YAMLTooLarge(f"more than {MAX_EVENTS:,} YAML nodes (a recipe has hundreds)")
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:  # libyaml's composer recurses in C: 25 000 levels crash the process
                raise YAMLTooLarge(f"nested more than {MAX_DEPTH} levels deep")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def expanded_nodes(root: yaml.Node, limit: int = MAX_EXPANDED_NODES) -> int:
    """Nodes of ``root`` with aliases expanded (each shared node counted once per reference, computed once;
    iterative, so deep nesting costs no recursion); stops counting past ``limit``. An alias inside the node it
    names (``a: &a [*a]``: an endless value) and nesting deeper than ``MAX_DEPTH`` once aliases are expanded raise
    ``YAMLTooLarge``. Linear in the node graph (each node's children visited once)."""
    sizes: dict[int, int] = {}
    depths: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        children = ([n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode)
                    else list(node.value) if isinstance(node, yaml.SequenceNode) else [])
        if done:
            open_.discard(key)
            sizes[key] = min(limit + 1, 1 + sum(sizes[id(c)] for c in children))
            depths[key] = 1 + max((depths[id(c)] for c in children), default=0)
            if depths[key] > MAX_DEPTH + 1:
                raise YAMLTooLarge(f"nested more than {MAX_DEPTH} levels deep once its aliases (*name) are expanded")
            continue
        if key in sizes:
            continue
        if key in open_:  # reached again from inside itself: only an alias does that
            line = node.start_mark.line + 1 if node.start_mark is not None else "?"
            raise YAMLTooLarge(f"an alias (*name) refers to the node that contains it (line {line}): the value "
                               "would be endless")
        open_.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)
    return sizes[id(root)]


def load(text: str, duplicates: list[str] | None = None) -> Any:
    """``yaml.safe_load`` within the bounds above; appends the duplicate keys it meets to ``duplicates``.
    Raises ``YAMLTooLarge``, ``YAMLValueError`` (a value PyYAML cannot construct, e.g. a timestamp out of range)
    or another ``yaml.YAMLError``: nothing else."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_TEXT_BYTES:
        raise YAMLTooLarge(f"{size:,} bytes of YAML, more than {MAX_TEXT_BYTES:,}")
    _count_events(text)
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if expanded_nodes(node) > MAX_EXPANDED_NODES:
            raise YAMLTooLarge(f"the document's aliases (*name) expand to more than {MAX_EXPANDED_NODES:,} "
                               "nodes")
        try:
            return loader.construct_document(node)
        except (ValueError, TypeError, AttributeError, KeyError, IndexError, OverflowError, RecursionError) as err:
            # PyYAML's constructors raise these for values its resolver accepted but it cannot build (a
            # ``!!timestamp 99999-01-01`` fails its own regex: AttributeError; ``2024-13-45``: ValueError)
            raise YAMLValueError(f"a value YAML cannot construct ({cut(str(err))})") from None
    finally:
        if duplicates is not None:
            duplicates += loader.duplicates
        loader.dispose()


__all__ = ["MAX_DEPTH", "MAX_EVENTS", "MAX_EXPANDED_NODES", "MAX_TEXT_BYTES", "YAMLTooLarge", "YAMLValueError",
           "expanded_nodes", "load"]
