"""Runs several `main.main(argv)` calls in one process, for bad-input tests that each need only an error message.

    python tests/_reliability_cases.py '[["--mode", "evaluate", ...], ...]'
Prints one JSON line: [{"rc": int, "out": str, "err": str}, ...] (Python-level stdout/stderr of each call; an
uncaught exception is reported as rc "traceback" with the exception text, so the test fails clearly).
"""
import contextlib
import io
import json
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import main  # noqa: E402


def run_case(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main.main(argv)
        except SystemExit as exit_:
            rc = exit_.code
        except BaseException:  # noqa: BLE001 - the test wants to see any traceback
            rc = "traceback"
            err.write(traceback.format_exc())
    return {"rc": rc, "out": out.getvalue(), "err": err.getvalue()}


if __name__ == "__main__":
    results = [run_case(case) for case in json.loads(sys.argv[1])]
    sys.stdout.write(json.dumps(results) + "\n")
