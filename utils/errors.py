"""The one exception type for problems the user can fix (bad flag, missing data, corrupt input)."""


class UserError(Exception):
    """Raised for bad input; the CLI prints `ERROR: <message>` on one line and exits non-zero."""
