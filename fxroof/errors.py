"""The one exception type for user errors: a one-paragraph message saying what was wrong and
what to do. The CLI prints it without a traceback and exits with status 2."""


class FxroofError(Exception):
    pass
