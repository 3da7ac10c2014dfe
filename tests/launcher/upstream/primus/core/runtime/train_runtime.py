"""Test fixture: stands in for Primus's ``primus/core/runtime/train_runtime.py`` (fd1eeab).

``PrimusRuntime(args=args).run_train_module(module_name=..., overrides=[...])`` is where the real
runtime builds the backend, initialises torch.distributed and trains; here it prints what it got.
"""


class PrimusRuntime:
    def __init__(self, args):
        self.args = args

    def run_train_module(self, module_name, overrides):
        print(f"primus: run_train_module {module_name} {self.args.config} {list(overrides)}")
