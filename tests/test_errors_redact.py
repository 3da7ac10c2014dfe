"""``errors.redact``: text read from the environment is found however an output encodes it, and shown as its template.

    PYTHONPATH=$PWD python -m pytest -q tests/test_errors_redact.py
"""

from __future__ import annotations

import html
import json

import pytest

from primus_ext.errors import Problem, forget_env_texts, redact, shown
from primus_ext.recipe.templates import expand_string

SECRET = 'pw"<&>\\é-Secret'


@pytest.fixture(autouse=True)
def clean():
    forget_env_texts()
    yield
    forget_env_texts()


def _expand(text: str, env: dict[str, str]) -> object:
    return expand_string(text, env, [], path="x")


def test_every_encoding_of_a_value_is_replaced_by_the_same_encoding_of_its_template():
    _expand("dsn-${ZZ_CONN}", {"ZZ_CONN": SECRET})
    value = f"dsn-{SECRET}"
    encodings = (value, json.dumps(value)[1:-1], html.escape(value), html.escape(html.escape(value)))
    for encoded in encodings:
        assert redact(f"<{encoded}>") == "<dsn-${ZZ_CONN}>"
    assert redact(f"<{SECRET}>") == "<${ZZ_CONN}>"
    doc = json.dumps({"k": value, "also": SECRET})
    assert json.loads(redact(doc)) == {"k": "dsn-${ZZ_CONN}", "also": "${ZZ_CONN}"}


def test_a_path_built_from_a_url_is_found_normalised():
    _expand("${REDIS_URL}", {"REDIS_URL": "postgresql://u:pw-123456@db/x"})
    assert redact("searched: models/postgresql:/u:pw-123456@db/x") == "searched: models/${REDIS_URL}"


def test_problems_and_values_are_shown_redacted():
    _expand("${REDIS_URL}", {"REDIS_URL": "redis://:Tok3n-abc@h:6379"})
    problem = Problem(path="k", message="bad", value={"k": "redis://:Tok3n-abc@h:6379"})
    assert "Tok3n" not in str(problem) and "${REDIS_URL}" in str(problem)
    assert "Tok3n" not in shown("redis://:Tok3n-abc@h:6379" * 20)  # cut after hiding, not before


def test_numbers_and_defaults_are_parameters_not_hidden():
    assert _expand("${PRIMUS_SEQ:4096}", {}) == 4096 and redact("4096") == "4096"  # a default is the recipe's
    assert _expand("${PRIMUS_SEQ}", {"PRIMUS_SEQ": "8192"}) == 8192
    _expand("seq-${PRIMUS_SEQ}", {"PRIMUS_SEQ": "8192"})  # the text is hidden, the bare number is not
    assert redact("seq-8192 at 8192 tokens") == "seq-${PRIMUS_SEQ} at 8192 tokens"


def test_junit_xml_attributes_and_text_are_covered():
    import xml.etree.ElementTree as ET

    _expand("${ZZ_CONN}", {"ZZ_CONN": SECRET + "'"})  # both quotes: ElementTree escapes " in attributes, not '
    element = ET.Element("failure", {"message": f"entry: {SECRET}'"})
    element.text = f"got {SECRET}'"
    shown_xml = redact(ET.tostring(element, encoding="unicode"))
    assert shown_xml == '<failure message="entry: ${ZZ_CONN}">got ${ZZ_CONN}</failure>'


def test_short_common_words_from_primus_templates_do_not_blank_a_report():
    assert _expand("${PRIMUS_USER:root}", {"PRIMUS_USER": "root"}) == "root"  # still an EnvText, hidden as a value
    assert redact("store at /root/.cache, on amd GPUs") == "store at /root/.cache, on amd GPUs"
