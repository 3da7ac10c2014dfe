"""Megatron's ``moe_layer_freq`` -> a per-layer MoE pattern, without ``eval``.

Megatron accepts an int N (one MoE layer every N layers, starting at layer 0), a list of 0/1, or a
Python expression string such as ``"([0]*3+[1]*58)"`` that its argparse type evaluates. This module
parses that expression with a tiny grammar instead::

    expr   := term ('+' term)*
    term   := factor ('*' factor)*
    factor := INT | '[' INT (',' INT)* ']' | '(' expr ')'

Usage::

    moe_pattern("([0]*3+[1]*58)", num_layers=61)  # -> (False, False, False, True, ...)
"""

from __future__ import annotations

import re

MAX_PATTERN_LENGTH = 100_000
"""Longest list an expression may build (guards ``[0]*10**9``-style input; no model has more layers)."""

_TOKEN = re.compile(r"\s*(\d{1,9}|[\[\]()+*,])")


class PatternError(ValueError):
    """The expression is not a ``[a]*n+[b]*m``-style list of 0/1."""


def _tokens(text: str) -> list[str]:
    tokens, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise PatternError(f"unexpected character {text[pos:].strip()[:1]!r} at position {pos}")
        tokens.append(match.group(1))
        pos = match.end()
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.pos = 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token != expected):
            raise PatternError(f"expected {expected or 'a value'} at token {self.pos}, got {token!r}")
        self.pos += 1
        return token

    def parse(self) -> int | list[int]:
        value = self.expr()
        if self.peek() is not None:
            raise PatternError(f"unexpected {self.peek()!r} at token {self.pos}")
        return value

    def expr(self) -> int | list[int]:
        value = self.term()
        while self.peek() == "+":
            self.take("+")
            right = self.term()
            if isinstance(value, list) != isinstance(right, list):
                raise PatternError("'+' needs two lists or two integers")
            value = value + right  # type: ignore[operator]
            _guard(value)
        return value

    def term(self) -> int | list[int]:
        value = self.factor()
        while self.peek() == "*":
            self.take("*")
            right = self.factor()
            if isinstance(value, list) and isinstance(right, list):
                raise PatternError("'*' needs an integer operand")
            if isinstance(value, int) and isinstance(right, int):
                value = value * right
            else:
                times = value if isinstance(value, int) else right
                items = right if isinstance(value, int) else value
                assert isinstance(times, int) and isinstance(items, list)
                if times * len(items) > MAX_PATTERN_LENGTH:
                    raise PatternError(f"pattern longer than {MAX_PATTERN_LENGTH} layers")
                value = items * times
            _guard(value)
        return value

    def factor(self) -> int | list[int]:
        token = self.take()
        if token.isdigit():
            return int(token)
        if token == "(":
            value = self.expr()
            self.take(")")
            return value
        if token == "[":
            items = [int(self.take_int())]
            while self.peek() == ",":
                self.take(",")
                if self.peek() == "]":
                    break
                items.append(int(self.take_int()))
            self.take("]")
            return items
        raise PatternError(f"unexpected {token!r} at token {self.pos - 1}")

    def take_int(self) -> str:
        token = self.take()
        if not token.isdigit():
            raise PatternError(f"expected an integer at token {self.pos - 1}, got {token!r}")
        return token


def _guard(value: int | list[int]) -> None:
    if isinstance(value, int) and value > MAX_PATTERN_LENGTH:
        raise PatternError(f"integer {value} too large in a layer pattern")
    if isinstance(value, list) and len(value) > MAX_PATTERN_LENGTH:
        raise PatternError(f"pattern longer than {MAX_PATTERN_LENGTH} layers")


def parse_pattern_expression(text: str) -> int | list[int]:
    """``"([0]*3+[1]*58)"`` -> list; ``"2"`` -> int. Raises ``PatternError``."""
    if len(text) > 10_000:
        raise PatternError("expression too long")
    try:
        return _Parser(text).parse()
    except RecursionError:  # the parser recurses per bracket: a few hundred nested ones exhaust the stack
        raise PatternError("expression nested too deeply") from None


def moe_pattern(freq: object, num_layers: int) -> tuple[bool, ...]:
    """Per-layer MoE flags from ``moe_layer_freq`` (int, list of 0/1, or expression string).

    Mirrors megatron-core ``get_gpt_decoder_block_spec``: an int N marks layers with ``i % N == 0``;
    a list must have one 0/1 entry per layer. Raises ``PatternError`` with the reason.
    """
    value: object = freq
    if isinstance(value, str):
        value = parse_pattern_expression(value)
    if isinstance(value, bool):
        raise PatternError("expected an int, a list of 0/1 or an expression like '([0]*3+[1]*58)'")
    if isinstance(value, int):
        if value < 1:
            raise PatternError("an integer frequency must be >= 1")
        return tuple(i % value == 0 for i in range(num_layers))
    if isinstance(value, list | tuple):
        if any(isinstance(v, bool) or v not in (0, 1) for v in value):
            raise PatternError("list entries must be 0 (dense) or 1 (MoE)")
        if len(value) != num_layers:
            raise PatternError(f"pattern has {len(value)} entries but num_layers is {num_layers}")
        return tuple(bool(v) for v in value)
    raise PatternError("expected an int, a list of 0/1 or an expression like '([0]*3+[1]*58)'")
