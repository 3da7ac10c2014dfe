"""Issue 55, part 4: one vocabulary for a configuration. The tuner's axes are the recipe's field names; the short
names (tp, mbs, ...) are labels, accepted where a person types them (``--pin``) or an older log carries them."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from primus_ext.cli import main
from primus_ext.tune.axes import LABELS, MBS, TP, canonical

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "llama3.1_8B-pretrain.yaml"
ARGS = ["--cluster", "h100", "--nodes", "1", "--no-regret"]


def _timeless(value: Any) -> Any:
    """A document without its wall-clock figures (everything else must match)."""
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items() if "wall" not in k}
    if isinstance(value, list):
        return [_timeless(v) for v in value]
    return value


def _tune(tmp_path: Path, name: str, *extra: str) -> dict[str, Any]:
    out = tmp_path / f"{name}.json"
    assert main(["tune", str(RECIPE), *ARGS, *extra, "--json", str(out)]) == 0
    return _timeless(json.loads(out.read_text()))


def test_a_pin_by_label_and_by_name_give_the_same_tune(tmp_path: Path):
    common = ["--strategy", "exhaustive", "--budget", "40", "--pin", "pp=1"]
    short = _tune(tmp_path, "short", *common, "--pin", "tp=2", "--pin", "mbs=1,2")
    long = _tune(tmp_path, "long", *common, "--pin", "tensor_model_parallel_size=2", "--pin", "micro_batch_size=1,2")
    assert short == long
    assert short["best"]["config"][TP] == 2 and short["best"]["config"][MBS] in (1, 2)
    assert all(set(t["config"]) <= set(LABELS) for t in short["ranked"])  # the document speaks the names only
    assert "mbs" not in short["best"]["config"] and "tp" not in short["best"]["config"]


def _old_style(log: Path, into: Path) -> None:
    """``log`` rewritten as a primus-ext before this change wrote it: every axis under its short label."""
    lines = []
    for line in log.read_text().splitlines():
        item = json.loads(line)
        if "header" in item:
            item["header"]["pins"] = {LABELS[k]: v for k, v in item["header"]["pins"].items()}
        else:
            item["trial"]["config"] = {LABELS[k]: v for k, v in item["trial"]["config"].items()}
        lines.append(json.dumps(item))
    into.write_text("\n".join(lines) + "\n")


def test_an_old_log_with_short_keys_resumes(tmp_path: Path):
    recipe = tmp_path / "recipe.yaml"
    shutil.copy(RECIPE, recipe)
    log = tmp_path / "trials.jsonl"
    pins = ["--pin", "mbs=1,2"]
    assert main(["tune", str(recipe), *ARGS, *pins, "--budget", "4", "--log", str(log)]) == 0
    old = tmp_path / "old.jsonl"
    _old_style(log, old)
    assert '"mbs"' in old.read_text() and '"micro_batch_size"' not in old.read_text()
    docs = []
    for name, journal in (("new", log), ("old", old)):
        out = tmp_path / f"{name}.json"
        assert main(["tune", str(recipe), *ARGS, *pins, "--budget", "8", "--resume", str(journal),
                     "--json", str(out)]) == 0
        docs.append(_timeless(json.loads(out.read_text())))
    assert docs[0] == docs[1]  # the old log's trials are the same evidence, read under the names
    assert docs[0]["stats"]["cache_hits"] or docs[0]["ranked"]


def test_canonical_translates_labels_and_keeps_the_rest():
    assert canonical({"tp": 2, "mbs": 1, "split": "default"}) == {TP: 2, MBS: 1, "split": "default"}
    assert canonical({"tp": 2, TP: 4}) == {"tp": 2, TP: 4}  # both ways: nothing dropped, the label stays unknown
    assert canonical({"nope": 1}) == {"nope": 1}


SCOPE = ("tune", "results", "report", "cli", "launcher")
"""Packages that hold configurations."""
SHORT = sorted(label for name, label in LABELS.items() if label != name)


def _spelled(package: str, labels: list[str]) -> list[str]:
    """Lines of ``primus_ext/<package>`` (``tune/axes.py``, the one table of labels, aside) quoting a label."""
    quoted = re.compile("[\"']({})[\"']".format("|".join(labels)))
    return [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
            for path in sorted((ROOT / "primus_ext" / package).rglob("*.py")) if path.name != "axes.py"
            for number, line in enumerate(path.read_text().splitlines(), 1) if quoted.search(line)]


@pytest.mark.parametrize("package", SCOPE)
def test_no_module_spells_mbs(package: str):
    assert not _spelled(package, ["mbs"]), "\n".join(_spelled(package, ["mbs"]))


def test_the_tuner_spells_no_short_label():
    """Inside ``tune/`` no label at all (elsewhere tp / pp / cp / ep also name communication kinds)."""
    assert not _spelled("tune", SHORT), "\n".join(_spelled("tune", SHORT))
