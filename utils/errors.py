"""The one exception type for problems the user can fix (bad flag, missing data, corrupt input), and the wrapper
every command-line tool's `main` goes through so they all fail the same way."""

import functools
import os
import sys

from utils import quiet


class UserError(Exception):
    """Raised for bad input; the CLI prints `ERROR: <message>` on one line and exits non-zero."""


def restrict_umask():
    """Files and directories we create are never group/world-writable, whatever the caller's umask (a stricter
    umask is kept). TensorFlow and Python create files with mode 0666 & ~umask (docs/RELIABILITY.md)."""
    os.umask(os.umask(0o022) | 0o022)


def command(body):
    """Decorates a tool's `main(argv=None)`: restricts the umask, turns a UserError into one line
    `ERROR: <message>` on stderr and exit status 2, and maps a `None` return to 0. argparse's own usage errors
    (SystemExit 2) pass through unchanged. Run as a script (`python tool.py`, `python -m pkg.tool`), the tool
    first gets the quiet TensorFlow output of utils/quiet.py (`--verbose` / RN50_VERBOSE=1 turn it off); called
    in-process (tests) it leaves the caller's environment and stderr alone."""

    @functools.wraps(body)
    def main(argv=None):
        if body.__module__ == "__main__":
            quiet.setup(argv)
        restrict_umask()
        try:
            status = body(argv)
        except UserError as error:
            print(f"ERROR: {error}", file=sys.stderr, flush=True)
            return 2
        return 0 if status is None else status

    return main
