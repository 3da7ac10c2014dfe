"""Issue 56, part 4: a ``tune --resume`` file whose header is a list (``AttributeError: 'list' object has no
attribute 'get'``, fixed by 08c7318's line check; kept here as the issue's reproducer) or whose line is nested past
Python's recursion limit (``RecursionError``) is refused with its line, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from primus_ext.errors import RecipeError
from primus_ext.tune.agent import read_log


@pytest.mark.parametrize(("first", "said"), [
    ('{"header": [1, 2], "version": 1}', "expected {\"header\""),
    ("[1, 2]", "expected {\"header\""),
    ('{"header": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested deeper than 64 levels"),
    ('{"trial": {"config": {"a": 1' + "0" * 5000 + "}}}", "4300 digits"),
])
def test_a_malformed_first_line_is_refused_with_its_line(tmp_path: Path, first: str, said: str) -> None:
    log = tmp_path / "trials.jsonl"
    log.write_text(first + "\n")
    with pytest.raises(RecipeError) as err:
        read_log(log)
    assert f"{log}:1" in str(err.value) and said in str(err.value)
