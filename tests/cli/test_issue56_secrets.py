"""Issue 56 part 2: a value from the environment is shown as its template by origin, whatever the variable is called.

    PYTHONPATH=$PWD python -m pytest -q tests/cli/test_issue56_secrets.py

The reported cases: ``${REDIS_URL}`` inside a mapping a key validates (the error echoed the URL), an ``extends:``
template of ``${ZZ_CONN}`` (the tune JSON held ``password=...``); then every other way out: project's JSON and HTML,
compare's, the trial log, ``recipe show``, and the LLM request body (the tune agent's prompt).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from primus_ext.cli import main

REPO = Path(__file__).resolve().parents[2]
URL = "postgresql://svc_user:Hunter2pw-7c1@db.internal:5432/prod"
CONN = 'password=Zz9"sec\\ret;host=db'
"""A quote and a backslash: JSON writes them escaped, so the raw text alone is not what a leak looks like."""
MARKS = ("Hunter2pw", "Zz9")


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("REDIS_URL", URL)
    monkeypatch.setenv("ZZ_CONN", CONN)
    monkeypatch.chdir(tmp_path)
    for sub in ("models", "modules"):
        shutil.copytree(REPO / "recipes" / sub, tmp_path / sub)
    return tmp_path


def _recipe(folder: Path, *, head: str = "", override: str = "", name: str = "r.yaml") -> Path:
    text = (REPO / "recipes" / "llama3.1_8B-pretrain.yaml").read_text()
    text = text.replace("      train_iters: 50\n", f"      train_iters: 50\n{override}")
    path = folder / name
    path.write_text(head + text)
    return path


def _everything(folder: Path, captured) -> str:
    files = "".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file()
                    and p.suffix in (".json", ".html", ".jsonl", ".md", ".xml"))
    return captured.out + captured.err + files


def _no_secret(text: str) -> None:
    for mark in MARKS:
        assert mark not in text


def test_a_url_in_a_validated_mapping_is_shown_as_its_template(folder, capsys):
    recipe = _recipe(folder, override="      zz_extra: 1\n").read_text().replace(
        "      micro_batch_size: 2\n", "      micro_batch_size:\n        k: ${REDIS_URL}\n")
    (folder / "r.yaml").write_text(recipe)
    assert main(["project", "r.yaml", "--analytic"]) == 2
    err = capsys.readouterr().err
    _no_secret(err)
    assert "micro_batch_size" in err and "{'k': '${REDIS_URL}'}" in err


@pytest.mark.parametrize("command", [
    ["tune", "e.yaml", "--analytic", "--budget", "2", "--no-regret", "--json", "t.json", "--log", "t.jsonl"],
    ["project", "e.yaml", "--analytic", "--json", "p.json", "--html", "p.html"],
    ["compare", "e.yaml", "micro_batch_size=1", "--analytic", "--json", "c.json", "--html", "c.html"],
    ["recipe", "show", "e.yaml", "--json"],
])
def test_an_extends_template_reaches_no_output(folder, capsys, command):
    _recipe(folder, head="extends: ${ZZ_CONN}\n", name="e.yaml")
    assert main(command) == 0
    everything = _everything(folder, capsys.readouterr())
    _no_secret(everything)
    assert "${ZZ_CONN}" in everything  # the warning that the extends target is missing names the template


def test_a_quoted_value_in_an_unknown_key_is_hidden_in_json_escaped_form(folder, capsys):
    _recipe(folder, override="      zz_connection: x-${ZZ_CONN}\n")
    assert main(["project", "r.yaml", "--analytic", "--json", "p.json"]) == 0
    _no_secret(_everything(folder, capsys.readouterr()))
    assert json.loads((folder / "p.json").read_text())  # still a JSON document


def test_the_llm_request_shows_the_template(folder, capsys, monkeypatch):
    """The model preset's name comes from the environment: the prompt names the template, not the value."""
    from primus_ext.tune.strategies import llm

    shutil.copy(folder / "models" / "llama3.1_8B.yaml", folder / "models" / "svc-Hunter2pw-model.yaml")
    monkeypatch.setenv("ZZ_MODEL", "svc-Hunter2pw-model")
    text = _recipe(folder).read_text().replace("    model: llama3.1_8B.yaml", "    model: ${ZZ_MODEL}.yaml")
    (folder / "r.yaml").write_text(text)
    sent: list[str] = []

    def fake_completion(model, *, api_base, timeout_s):
        def call(messages, deadline_s=None):
            sent.extend(m["content"] for m in messages)
            return json.dumps({"rationale": "keep", "configs": []})
        return call

    monkeypatch.setattr(llm, "litellm_completion", fake_completion)
    code = main(["tune", "r.yaml", "--analytic", "--strategy", "llm", "--llm", "openai/fake", "--budget", "3",
                 "--no-regret", "--json", "t.json"])
    assert code == 0 and sent
    _no_secret("".join(sent) + _everything(folder, capsys.readouterr()))
    assert "${ZZ_MODEL}" in "".join(sent)
