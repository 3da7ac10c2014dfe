"""Make ``docs/report.png``: the top of the HTML report of Llama-3.1-405B (192 micro-batches x 8 chunks on PP 8),
as headless Chromium renders it (the README shows it).

    python docs/report_screenshot.py [--recipe recipes/llama3.1_405B-pretrain.yaml] [--out docs/report.png]

Needs Debian's ``chromium``. ``tests/report/test_html.py`` checks the same page's legibility.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WINDOW = (1200, 760)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default=str(ROOT / "recipes" / "llama3.1_405B-pretrain.yaml"))
    parser.add_argument("--out", default=str(ROOT / "docs" / "report.png"))
    args = parser.parse_args(argv)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("error: chromium not found (apt-get install -y chromium)", file=sys.stderr)
        return 2
    from primus_ext.projection import project
    from primus_ext.recipe import load_recipe
    from primus_ext.report.html import ReportInputs, render_html

    recipe = load_recipe(args.recipe, [])
    projection = project(recipe.model, recipe.execution, recipe.system, None)
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "report.html"
        page.write_text(render_html(projection, inputs=ReportInputs(recipe=Path(args.recipe).name)), encoding="utf-8")
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--user-data-dir={Path(tmp) / 'profile'}", f"--window-size={WINDOW[0]},{WINDOW[1]}",
                        f"--screenshot={Path(args.out).resolve()}", page.as_uri()],
                       check=True, capture_output=True, timeout=90)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
