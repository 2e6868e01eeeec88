"""Python loads this module at start-up in the child processes of the tests marked `shallow` (tests/_shallow.py
puts its directory on PYTHONPATH): when TESTS_SHALLOW_ARCHITECTURES=1, model.resnet's architectures are made
shallow as soon as model.resnet is imported. Nothing is imported before then, so a child that never builds a
model (a launcher, horovodrun) starts as fast as without it."""
import importlib.abc
import importlib.machinery
import os
import sys


class _ShallowResnet(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "model.resnet":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            from tests._shallow import make_shallow
            make_shallow(module.ARCHITECTURES)

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("TESTS_SHALLOW_ARCHITECTURES") == "1":
    sys.meta_path.insert(0, _ShallowResnet())
