"""primus-ext: hybrid (measured + analytic) projection and auto-tuning for Megatron-core training.

The data path, one package per layer:

    recipe (YAML) -> specs (model / execution / system) -> measure | model (per-rank costs)
                  -> projection -> tune -> launcher

Run ``primus-ext --help`` for the commands.
"""

__version__ = "0.1.0"
