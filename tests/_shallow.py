"""Shallow architectures for the flow tests: in a test module marked `shallow` (and in every process its tests
start), each entry of model.resnet.ARCHITECTURES keeps its widths, groups and SE but has one bottleneck block per
stage. The flows (checkpoints, resume, signals, engines, export, tools) do not depend on the depth, and a
one-block-per-stage ResNet-50 builds and traces about three times faster. The full depths stay covered where the
depth is the subject: test_model (architectures, counts), test_checkpoint_names (the original's variable names and
checkpoints, an earlier main.py's checkpoint).

In-process the module's entries are replaced for the module's duration (tests/conftest.py); child processes see
TESTS_SHALLOW_ARCHITECTURES=1 and load tests/shallow_site/sitecustomize.py from PYTHONPATH, which applies the same
replacement when model.resnet is first imported."""
import dataclasses
import os

ENV = "TESTS_SHALLOW_ARCHITECTURES"
LAYERS = (1, 1, 1, 1)  # bottleneck blocks per stage
SITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shallow_site")


def shallow(spec):
    return dataclasses.replace(spec, layers=LAYERS)


def make_shallow(architectures, setitem=None):
    """Replaces every entry of `architectures` (model.resnet.ARCHITECTURES) by its shallow form, through
    `setitem(mapping, key, value)` when given (a MonkeyPatch's, to be undone)."""
    for arch, spec in list(architectures.items()):
        if setitem is None:
            architectures[arch] = shallow(spec)
        else:
            setitem(architectures, arch, shallow(spec))


def apply(monkeypatch):
    """Shallow architectures in this process and its children, undone with `monkeypatch`."""
    from model import resnet
    make_shallow(resnet.ARCHITECTURES, monkeypatch.setitem)
    monkeypatch.setenv(ENV, "1")
    path = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", SITE + (os.pathsep + path if path else ""))
