"""The user's files: never written over unless told to, never half written, never read
without end.

Every output is written to a temporary file in the target's folder and renamed into place
(``os.replace`` is atomic on POSIX and Windows), so an interrupted run leaves the old file or
the whole new one, and two processes never see each other's partial output.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import tempfile
from typing import Iterator

from fxroof import interrupts
from fxroof.errors import FxroofError, UsageError


def file_safe(name: str, limit: int = 120) -> str:
    """A name usable as one path component: a model spec such as 'hf:/path/config.json' or
    'pkg.mod:fn' with every character outside letters, digits, '.', '-' and '_' replaced."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_.")[-limit:] or "_"


def check_writable(path: str, overwrite: bool, suffix: str = "") -> None:
    """Never overwrite a user's file without being told to; fail before any work is lost.
    ``suffix``: the kind of file written (".png"), for the example a folder given is told."""
    if not isinstance(overwrite, bool):  # overwrite="no" is a true value in Python
        raise UsageError(f"overwrite is True or False, not {overwrite!r:.40}: fxroof replaces "
                         "an existing file only when told to in so many words.")
    if not isinstance(path, (str, os.PathLike)):
        raise UsageError(f"A file to write is named by a path (a str or os.PathLike), not "
                         f"{type(path).__name__} {path!r:.40}: e.g. 'r.json' or 'r.png'.")
    if not os.fspath(path).strip():
        raise UsageError(f"The path of the file to write is {'blank' if path else 'empty'}"
                         f"{f' ({os.fspath(path)!r})' if path else ''}: name a file, e.g. "
                         "'out.json' (a shell variable left unset passes an empty one).")
    _refuse_special(path)
    folder = os.path.dirname(written_path(path))
    if os.path.isdir(path):
        raise FxroofError(f"Cannot write '{path}': it is a folder. Name a file inside it, "
                          f"e.g. '{os.path.join(path, 'out' + (suffix or _suffix(path)))}'.")
    if not os.path.isdir(folder):
        tilde = (" A leading '~' is the shell's to expand, not Python's: use "
                 "os.path.expanduser.") if os.fspath(path).startswith("~") else ""
        raise FxroofError(f"Cannot write '{path}': the folder '{folder}' does not exist. Create "
                          f"it first or choose another path.{tilde}")
    if not os.access(folder, os.W_OK):
        raise FxroofError(f"Cannot write '{path}': the folder '{folder}' is not writable. "
                          "Choose another path.")
    if os.path.exists(path) and not overwrite:
        raise FxroofError(f"'{path}' already exists and fxroof does not overwrite files unless "
                          "asked: pass --force (overwrite=True in Python) or choose another path.")
    try:  # /proc and read-only mounts pass os.access, yet take no new file
        fd, probe = tempfile.mkstemp(prefix=".fxroof-probe.", dir=folder)
    except OSError as e:
        raise _no_new_file(path, folder, e) from None
    os.close(fd)
    os.unlink(probe)


def written_path(path: str) -> str:
    """The file that writing ``path`` replaces: ``path`` itself, or where it is a symbolic
    link, the file the link leads to -- renaming over the link would leave the user's link a
    plain file and its target stale."""
    return os.path.realpath(path)


# What a non-regular file is, for the error: renaming over it would replace it.
_SPECIAL = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
            (stat.S_ISFIFO, "a pipe"), (stat.S_ISSOCK, "a socket"))


def _refuse_special(path: str) -> None:
    """Refuse a device, pipe or socket (/dev/null, /dev/stdout): an atomic write renames a
    new file over the path, which would replace the device itself (as root, /dev/null)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # nothing there yet, or nothing readable: the folder checks speak for it
    kind = next((name for test, name in _SPECIAL if test(mode)), None)
    if kind:
        raise FxroofError(f"Cannot write '{path}': it is {kind}, not a regular file. fxroof "
                          "writes each output to a temporary file and renames it into place, "
                          "which would replace it. Name an ordinary file (to discard an output, "
                          "leave its option out).")


def read_text(path: str, limit: int, what: str) -> str:
    """The text of ``path`` (UTF-8), refused past ``limit`` characters as not being ``what``
    (e.g. "a chips file"). Read with a bound rather than checked by size first: a device or
    pipe (/dev/zero, a link to it) has no size and would be read until memory runs out.
    OSError and UnicodeDecodeError are the caller's to word."""
    with open(path, encoding="utf-8") as f:
        text = f.read(limit + 1)
    if len(text) > limit:
        raise FxroofError(f"'{path}' holds more than {limit:,} characters: too large for "
                          f"{what}. Is it the right file?")
    return text


def make_folder(folder: str, what: str) -> None:
    """Create ``folder`` and its parents for ``what`` (e.g. "the study folder"); a clear
    error where that cannot be."""
    if not os.fspath(folder).strip():
        raise UsageError(f"The path of {what} is {'blank' if folder else 'empty'}: name a "
                         "folder, e.g. 'out'.")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise FxroofError(f"Cannot create {what} '{folder}': {e.strerror or e}. Choose a path "
                          "in a folder you can write to.") from None


def _no_new_file(path: str, folder: str, error: OSError) -> FxroofError:
    return FxroofError(f"Cannot write '{path}': the folder '{folder}' takes no new file "
                       f"({error.strerror or error}). Choose a path in an ordinary folder you "
                       "can write to; nothing was written.")


def _suffix(path: str) -> str:
    return os.path.splitext(path.rstrip(os.sep))[1] or ".json"


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """Yield a temporary path beside ``path`` for a writer that takes a path (matplotlib,
    networkx); on success rename it to ``path`` (through a symbolic link: written_path), on
    failure remove it."""
    _refuse_special(path)  # checked before the work too (check_writable); it can change since
    path = written_path(path)
    folder = os.path.dirname(path)
    try:
        fd, partial = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".partial",
                                       dir=folder)
    except OSError as e:  # checked before the work (check_writable), but it can change since
        raise _no_new_file(path, folder, e) from None
    os.close(fd)
    try:
        yield partial
        interrupts.check()  # after Ctrl-C, nothing new is put in place
        os.chmod(partial, 0o666 & ~_umask())  # mkstemp makes it private; give the usual mode
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise


@contextlib.contextmanager
def atomic(path: str, mode: str = "w", **open_args) -> Iterator:
    """Open a file object that becomes ``path`` only once it is completely written."""
    with atomic_path(path) as partial, open(partial, mode, **open_args) as f:
        yield f


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json(path: str, data, overwrite: bool = False, indent=1) -> None:
    """Check, then write ``data`` as JSON atomically."""
    check_writable(path, overwrite)
    with atomic(path) as f:
        json.dump(data, f, indent=indent)
