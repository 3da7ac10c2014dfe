"""The suite never touches the user's home (issue 53 part 8): HOME, XDG and the default timing store point at a
folder of this test session (``tests/conftest.py``)."""

import os
from pathlib import Path

from primus_ext.measure.store import default_store_path


def test_the_default_store_and_home_are_the_sessions_own():
    home = Path(os.environ["HOME"])
    assert home.name.startswith("primus-ext-test-home-") and Path(os.path.expanduser("~")) == home
    assert default_store_path().resolve().is_relative_to(home.resolve())
    assert os.environ["XDG_CACHE_HOME"].startswith(str(home))
