"""Keep the suite's disk use bounded.

A ResNet-50 checkpoint with its momentum slots is ~185 MB, and the suite writes dozens of them: kept to the
end of the session, one run needs ~13 GB under the temporary directory. Each passing test's `tmp_path` is
removed when the test ends, and whatever a test module made under the base temporary directory (its module
fixtures' directories included) when the module ends. The directories of a failed test, or of a module in
which a test failed, stay for inspection.

`trained_run` is the one training run the test files share: main.py's training of a small, shallow ResNet-50 (5
classes, 32 px, one step). It lives for the whole session (per pytest-xdist worker); tests copy it (`copy_run`)
before they resume or change it.

A test module marked `shallow` (`pytestmark = pytest.mark.shallow`) runs with the architectures of tests/_shallow.py,
it and the processes it starts, and so does a test marked `shallow` itself (its module fixtures are not); the tests
that read `trained_run` must be marked.

Garbage collection: a worker's heap holds millions of objects (TensorFlow, Keras, traced graphs), and each full
collection walks all of them. What the imports made is moved out of the collector's sight (`gc.freeze`) and the
collector runs less often; in-process runs skip Keras' collection after each run (tests/_cli.py).
"""

import gc
import shutil
import signal

import pytest

from tests import _shallow

SESSION_PREFIX = "session-"

_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed:
        item.stash[_FAILED] = True
        item.module._tmp_failed = True
    elif report.when == "teardown" and not item.stash.get(_FAILED, False):
        path = (item.funcargs or {}).get("tmp_path")
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)
    return report


def pytest_configure(config):
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)
    # A suite started as a background job of a non-interactive shell (`bash .ci/run &`) inherits SIGINT ignored,
    # and so would every process a test starts: the Ctrl-C tests' children would never hear it. Python's own
    # handler here (in the main process and each xdist worker) lets children start with the default again.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _signal_handlers():
    """Each test starts with the worker's SIGINT and SIGTERM handlers: a child process inherits an ignored signal,
    so one left ignored by an in-process run would make a later signal test's child deaf to it."""
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    yield
    for signum, handler in before.items():
        if handler is not None and signal.getsignal(signum) != handler:
            signal.signal(signum, handler)


@pytest.fixture(autouse=True, scope="module")
def _remove_module_temporaries(request, tmp_path_factory):
    base = tmp_path_factory.getbasetemp()
    before = set(base.iterdir())
    yield
    if getattr(request.module, "_tmp_failed", False):
        return
    for path in set(base.iterdir()) - before:
        if not path.name.startswith(SESSION_PREFIX):
            shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(autouse=True, scope="module")
def _architectures(request):
    """The architectures of a `shallow` module (tests/_shallow.py) for all of it, its module fixtures included."""
    if request.node.get_closest_marker("shallow") is None:
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        _shallow.apply(patch)
        yield


@pytest.fixture(autouse=True)
def _test_architectures(request):
    """The architectures of tests/_shallow.py for a test marked `shallow` itself, in a module that is not."""
    if not any(mark.name == "shallow" for mark in request.node.own_markers):
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        _shallow.apply(patch)
        yield


def pytest_runtest_setup(item):
    if "trained_run" in item.fixturenames and item.get_closest_marker("shallow") is None:
        pytest.fail(f"{item.nodeid} reads trained_run, a shallow model: mark its module `shallow`", pytrace=False)


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory):
    """{"data_dir", "model_dir", "flags"}: data_dir holds 2 train shards of 8 and a validation shard of 6 images
    (40 px, labels 1..5); model_dir holds main.py's checkpoints 0 and 1 of `--mode train` with `flags` (5 classes,
    32 px, batch 4, seed 1). Read-only: copy it with `copy_run` to go on from it."""
    from tests._cli import main_in_process
    from tests._data_helpers import write_tfrecord_shards
    root = tmp_path_factory.mktemp(SESSION_PREFIX + "trained_run")
    data_dir, model_dir = root / "data", root / "run"
    write_tfrecord_shards(str(data_dir), "train", 2, 8, 40, num_classes=6)
    write_tfrecord_shards(str(data_dir), "validation", 1, 6, 40, num_classes=6, seed=1)
    flags = ("--num_classes", 5, "--image_size", 32, "--batch_size", 4, "--iter_unit", "batch", "--seed", 1,
             "--display_every", 1, "--no_progress")
    with pytest.MonkeyPatch.context() as patch:
        _shallow.apply(patch)
        main_in_process("--mode", "train", "--data_dir", data_dir, "--results_dir", model_dir, "--num_iter", 1,
                        *flags)
    return {"data_dir": data_dir, "model_dir": model_dir, "flags": flags}


def copy_run(run, destination):
    """A copy of `run`'s model_dir (trained_run) at `destination`, to resume or change."""
    shutil.copytree(run["model_dir"], destination)
    return destination


@pytest.fixture(scope="module")
def trained_model():
    """A small resnet50 (tests/_checkpoint_helpers.small_model) with randomised weights and BN statistics, built once
    per test module that asks for it."""
    from tests._checkpoint_helpers import randomise, small_model
    model = small_model(seed=3)
    randomise(model, 11)
    return model


@pytest.fixture(scope="module")
def resnet50_checkpoint(tmp_path_factory):
    """(prefix, values): a checkpoint in the original's TF1 format of resnet50 (at the module's depth) with random
    values."""
    import numpy as np
    from model.resnet import ARCHITECTURES
    from tests.test_checkpoint_names import random_values, write_tf1_checkpoint
    values = random_values("resnet50", np.random.default_rng(1), layers=ARCHITECTURES["resnet50"].layers)
    return write_tf1_checkpoint(str(tmp_path_factory.mktemp("rn50")), values), values
