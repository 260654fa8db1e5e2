"""The exception types for user errors: a one-paragraph message saying what was wrong and what
to do. The CLI prints it without a traceback and exits with status 1 (a failure) or, for a
UsageError (an argument value it could not use), status 2 like argparse's own usage errors."""


class FxroofError(Exception):
    """Something the user gave or asked for cannot be done; the message says what to do."""


class UsageError(FxroofError):
    """An argument's value is wrong (found after parsing, e.g. a key=value it cannot read)."""
