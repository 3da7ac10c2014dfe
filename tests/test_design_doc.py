"""docs/DESIGN.md is in the tree and every module that cites it names a section it has."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "DESIGN.md"
CITE = re.compile(r"""([\w/.]*DESIGN\.md)(?:\s+"([^"]+)")?""")


def test_every_citation_names_the_doc_and_a_section_of_it():
    headings = {line.lstrip("#").strip() for line in DESIGN.read_text(encoding="utf-8").splitlines()
                if line.startswith("#")}
    cited = []
    for path in sorted((ROOT / "primus_ext").rglob("*.py")):
        text = " ".join(path.read_text(encoding="utf-8").split())  # a citation may wrap a docstring line
        for doc, section in CITE.findall(text):
            cited.append(path.name)
            assert doc == "docs/DESIGN.md", f"{path}: cites {doc}, not docs/DESIGN.md"
            assert not section or section in headings, f"{path}: no section {section!r} in docs/DESIGN.md"
    assert cited, "no module cites docs/DESIGN.md: the check looks at the wrong thing"


def test_the_layer_table_names_every_layer_of_the_test():
    from test_layers import LAYERS

    text = DESIGN.read_text(encoding="utf-8")
    for layer in LAYERS:
        for name in layer:
            assert f"`{name}`" in text, f"docs/DESIGN.md 'Layers' does not place {name}"


def test_every_module_the_concept_table_names_exists():
    """'Where each concept lives' names files and folders (``model/roofline.py``, ``recipe/`` with its modules in
    parentheses): each is in the package (a renamed module is renamed in the doc too)."""
    text = DESIGN.read_text(encoding="utf-8")
    table = text[text.index("## Where each concept lives"):text.index("## How to add")]
    package = ROOT / "primus_ext"
    checked = 0
    for row in table.splitlines()[4:]:
        where = row.rstrip("|").rpartition("|")[2]
        for folder, inner in re.findall(r"`([\w/]+/)`(?:\s*\(([^)]*)\))?", where):
            assert (package / folder).is_dir(), f"docs/DESIGN.md: no folder primus_ext/{folder}"
            for name in re.findall(r"`(\w+)`", inner or ""):
                assert (package / folder / f"{name}.py").is_file() or (package / folder / name).is_dir(), (
                    f"docs/DESIGN.md: no module primus_ext/{folder}{name}")
                checked += 1
        for path in re.findall(r"`([\w/]+\.py)`", where):
            assert (package / path).is_file(), f"docs/DESIGN.md: no module primus_ext/{path}"
            checked += 1
    assert checked > 20, "the concept table was not read"
