"""`.ci/run` builds its own virtual environment and runs the README's test command, as written there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_test_command() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("Install and run the tests", 1)[1]
    return re.search(r"```bash\n(.+?)\n```", section, re.S).group(1).strip()


def test_ci_runs_the_readme_test_command_in_a_fresh_venv() -> None:
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    command = _readme_test_command()
    assert "python -m pytest" in command and "torch==2.13.0" in command
    assert command in script
    venv = re.search(r'"\$PYTHON" -m venv "\$VENV"', script)
    activate, run = script.index('source "$VENV/bin/activate"'), script.index(command)
    assert venv and venv.start() < activate < run
    assert not any("--system-site-packages" in line.split("#")[0] for line in script.splitlines())
    assert "mktemp -d" in script  # a new folder on every run, removed on exit
