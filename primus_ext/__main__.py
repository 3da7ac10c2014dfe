"""``python -m primus_ext`` is the same as ``primus-ext``."""

import sys

from primus_ext.cli import main

sys.exit(main())
