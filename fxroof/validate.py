"""Checks of the values a user passes, shared by the API and the command line: one wording per
kind of mistake. API checks raise UsageError; the ``*_arg`` forms are argparse ``type=``
functions, so the command line reports them as usage errors (exit status 2)."""
from __future__ import annotations

import argparse
import numbers
import re

from fxroof.errors import UsageError
from fxroof.units import DTYPE_ALIASES, FLOAT_DTYPES

_DEVICE = re.compile(r"^(cpu|cuda|cuda:\d+)$")


def positive_int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise UsageError(f"{what} must be a positive integer, not {value!r}.")
    return int(value)


def nonnegative_int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise UsageError(f"{what} must be an integer of at least 0, not {value!r}.")
    return int(value)


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None


def positive_int_arg(text: str) -> int:
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def nonnegative_int_arg(text: str) -> int:
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is below 0")
    return value


def device_arg(text: str) -> str:
    """'cpu', 'cuda' or 'cuda:N' (checked for presence later, when it is used)."""
    if not _DEVICE.match(text):
        raise argparse.ArgumentTypeError(f"'{text}' is not a device: use cpu, cuda or cuda:N")
    return text


def dtype_arg(text: str) -> str:
    name = DTYPE_ALIASES.get(text.lower())
    if name is None:
        raise argparse.ArgumentTypeError(
            f"'{text}' is not a dtype fxroof runs models in: use {', '.join(FLOAT_DTYPES)}")
    return name
