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


MAX_STORAGE_BYTES = 2 ** 62  # what a tensor's storage size (int64 bytes) can hold, with room


def shape(value, what: str = "an input shape", itemsize: int = 4) -> tuple[int, ...]:
    """A tensor shape of positive integers whose storage size fits in int64."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise UsageError(f"{what} must be a sequence of positive integers, not {value!r:.60}.")
    dims = tuple(value)
    if not dims or any(isinstance(d, bool) or not isinstance(d, numbers.Integral) or d < 1
                       for d in dims):
        raise UsageError(f"{what} must be positive integers, batch first (e.g. (8, 3, 224, "
                         f"224)), not {dims!r:.60}.")
    size = itemsize
    for d in dims:
        size *= int(d)
    if size > MAX_STORAGE_BYTES:
        raise UsageError(f"{what} {dims} holds {size // itemsize:.3g} elements: more than any "
                         "tensor's storage can address. Check the shape for a typo.")
    return tuple(int(d) for d in dims)


def device(value) -> str:
    """A device name for capture: 'cpu', 'cuda' or 'cuda:N', given so or as a torch.device
    (recognised by its type's name: the command line validates before importing torch)."""
    if (type(value).__module__, type(value).__name__) == ("torch", "device"):
        value = str(value)  # torch.device("cuda", 1) -> 'cuda:1'
    if not isinstance(value, str) or not _DEVICE.match(value):
        raise UsageError(f"device must be 'cpu', 'cuda' or 'cuda:N', not {value!r:.40}.")
    return value


MEMORY_FORMATS = ("contiguous", "channels_last")


def memory_format(value) -> bool:
    """None, 'contiguous' or 'channels_last'; True for channels_last (of 4-D tensors)."""
    if value is None or value == "contiguous":
        return False
    if value == "channels_last":
        return True
    raise UsageError(f"memory_format must be one of {', '.join(MEMORY_FORMATS)}, not "
                     f"{value!r:.40}.")
