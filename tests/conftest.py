"""Keep the suite's disk use bounded.

A ResNet-50 checkpoint with its momentum slots is ~185 MB, and the suite writes dozens of them: kept to the
end of the session, one run needs ~13 GB under the temporary directory. Each passing test's `tmp_path` is
removed when the test ends, and whatever a test module made under the base temporary directory (its module
fixtures' directories included) when the module ends. The directories of a failed test, or of a module in
which a test failed, stay for inspection.
"""

import shutil

import pytest

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


@pytest.fixture(autouse=True, scope="module")
def _remove_module_temporaries(request, tmp_path_factory):
    base = tmp_path_factory.getbasetemp()
    before = set(base.iterdir())
    yield
    if getattr(request.module, "_tmp_failed", False):
        return
    for path in set(base.iterdir()) - before:
        shutil.rmtree(path, ignore_errors=True)
