"""Suite-wide test settings.

litellm fetches a model-price map from the internet when imported unless told to use its bundled
copy; the tests (and primus-ext itself) never reach outside 127.0.0.1, so that is switched off here
before anything imports litellm.
"""

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
