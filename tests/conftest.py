"""Suite-wide test settings.

litellm fetches a model-price map from the internet when imported unless told to use its bundled
copy; the tests (and primus-ext itself) never reach outside 127.0.0.1, so that is switched off here
before anything imports litellm.
"""

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from hypothesis import settings

# Property tests run the same examples on every machine (CI reproducible): a failing example found by an exploring
# run elsewhere is a bug report, not a coin flip in CI. Explore with HYPOTHESIS_PROFILE=explore.
settings.register_profile("ci", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
