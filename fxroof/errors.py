"""The exception types for user errors: a one-paragraph message saying what was wrong and what
to do. The CLI prints it without a traceback and exits with status 1 (a failure) or, for a
UsageError (an argument value it could not use), status 2 like argparse's own usage errors."""


class FxroofError(Exception):
    """Something the user gave or asked for cannot be done; the message says what to do."""


class UsageError(FxroofError):
    """An argument's value is wrong (found after parsing, e.g. a key=value it cannot read)."""


class MissingPeakError(FxroofError):
    """A chip lists no peak for the dtype and engine some node needs: the step cannot be
    priced on it in this dtype. Carries what was needed and what the chip lists, so that a
    command pricing many chips can name them together instead of one paragraph each."""

    def __init__(self, message: str, chip_id: str, needed: str, listed: list):
        super().__init__(message)
        self.chip_id, self.needed, self.listed = chip_id, needed, listed
