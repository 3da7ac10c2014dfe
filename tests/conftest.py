"""Suite-wide test settings: no network for litellm, one target GPU for the tests' recipes, reproducible hypothesis.

litellm fetches a model-price map from the internet when imported unless told to use its bundled
copy; the tests (and primus-ext itself) never reach outside 127.0.0.1, so that is switched off here
before anything imports litellm.
"""

import os
import tempfile

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# No test touches the user's home: the default timing store ($PRIMUS_EXT_CACHE, else ~/.cache/primus-ext) and anything
# else a library keeps under HOME / XDG go to a folder of this session (tests/test_suite_home.py holds that).
os.environ["HOME"] = tempfile.mkdtemp(prefix="primus-ext-test-home-")
os.environ["XDG_CACHE_HOME"] = os.path.join(os.environ["HOME"], ".cache")
os.environ["XDG_CONFIG_HOME"] = os.path.join(os.environ["HOME"], ".config")
os.environ.pop("PRIMUS_EXT_CACHE", None)  # a store of the shell's would be the user's
# The small recipes the tests write state no target GPU, and primus-ext projects nothing on an unstated one
# (recipe.target: --cluster, the recipe's comment, $PRIMUS_EXT_CLUSTER, a Primus configs/<GPU>/ folder, this
# machine's GPUs). The suite names the profile its figures were written against, once, here (not inherited from
# the shell: every machine runs the same tests); tests of the rule itself clear it (tests/recipe/test_target.py).
os.environ["PRIMUS_EXT_CLUSTER"] = "mi300x"

import shutil

from hypothesis import settings

SUITE_HOME = os.environ["HOME"]


def pytest_sessionfinish(session, exitstatus):
    """The session's home goes with it."""
    shutil.rmtree(SUITE_HOME, ignore_errors=True)


# Property tests run the same examples on every machine (CI reproducible): a failing example found by an exploring
# run elsewhere is a bug report, not a coin flip in CI. Explore with HYPOTHESIS_PROFILE=explore.
settings.register_profile("ci", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
