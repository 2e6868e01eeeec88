"""The shared command wrapper: one-line errors, exit statuses and the umask every tool runs under."""
import os

import pytest

from utils.errors import UserError, command


def test_user_error_is_one_line_on_stderr_with_status_2(capsys):
    @command
    def main(argv=None):
        raise UserError(f"no train-* files in {argv[0]}")

    assert main(["/data"]) == 2
    captured = capsys.readouterr()
    assert captured.err == "ERROR: no train-* files in /data\n" and captured.out == ""


def test_statuses_pass_through_and_none_means_success():
    assert command(lambda argv: None)() == 0
    assert command(lambda argv: 3)() == 3
    assert command(lambda argv: argv)(0) == 0


def test_other_exceptions_are_not_swallowed():
    @command
    def main(argv=None):
        raise RuntimeError("a bug, not bad input")

    with pytest.raises(RuntimeError):
        main()


def test_umask_is_restricted_but_a_stricter_one_is_kept():
    previous = os.umask(0)
    try:
        command(lambda argv: None)()
        assert os.umask(0o077) == 0o022
        command(lambda argv: None)()
        assert os.umask(previous) == 0o077
    finally:
        os.umask(previous)
