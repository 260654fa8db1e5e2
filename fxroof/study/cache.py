"""The study's on-disk layout: one JSON file per (device, model, batch, phase) result.

    <out>/study.json                                  what was asked (models, batches, ...)
    <out>/cache/<device>/<model>/b<batch>/<phase>.json one result, or {"error": ...}
    <out>/chips/this-<device>.yaml                     the measured roofs of each device
    <out>/figures/*.png, <out>/data/*.csv|json, <out>/report.md, <out>/report.html

Each result is written to a temporary file and renamed into place, so an interrupted run leaves
only whole results behind and the next run picks up at the first missing one.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from typing import Optional

from fxroof.errors import FxroofError
from fxroof.files import atomic, file_safe, make_folder

MANIFEST = "study.json"
log = logging.getLogger(__name__)


class Cache:
    def __init__(self, root: str):
        self.root = root

    def path(self, device: str, model: str, batch: int, phase: str) -> str:
        return os.path.join(self.root, "cache", file_safe(device), file_safe(model), f"b{batch}",
                            f"{phase}.json")

    def get(self, device: str, model: str, batch: int, phase: str) -> Optional[dict]:
        """The cached result, or None when there is none; a damaged file (a crash of another
        tool, a full disk) counts as none, with a warning, and is computed again."""
        path = self.path(device, model, batch, phase)
        if not os.path.exists(path):
            return None
        try:
            result = _read(path)
        except FxroofError as e:
            log.warning("%s: computing that result again", e)
            return None
        return result if isinstance(result, dict) else None

    def put(self, device: str, model: str, batch: int, phase: str, result: dict) -> None:
        write_json(self.path(device, model, batch, phase), result)

    def chip_path(self, device: str) -> str:
        return os.path.join(self.root, "chips", f"this-{device.replace(':', '_')}.yaml")


def write_json(path: str, data) -> None:
    """Write atomically (a uniquely named temporary file renamed into place), so two runs on
    one folder never write into each other's partial file."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with atomic(path) as f:
        json.dump(data, f, indent=1)


def claim(root: str, config: dict, force: bool, defaults: Optional[dict] = None,
          resumable: tuple = ()) -> None:
    """Make ``root`` this study's folder: new, or holding this same study (resume). A folder
    with a different study, or with other files, is left alone unless ``force``. ``defaults``:
    the values of settings a folder made by an earlier fxroof does not record (added since);
    ``resumable``: settings a resumed study may change without being another study."""
    manifest = os.path.join(root, MANIFEST)
    if os.path.exists(root) and not os.path.isdir(root):
        raise FxroofError(f"'{root}' is a file, not a folder: --out names the folder the study "
                          "writes into. Choose a new folder name.")
    if os.path.exists(manifest):
        try:
            previous = _read(manifest)
        except FxroofError as e:
            if not force:
                raise FxroofError(f"{e}. Pass --force to start the study over, or choose "
                                  "another --out.") from None
            previous = None
        if not isinstance(previous, dict) and not force:
            raise FxroofError(f"'{manifest}' does not hold a study's settings: pass --force to "
                              "start the study over, or choose another --out.")
        if isinstance(previous, dict):
            previous = {**(defaults or {}), **previous}
            changed = sorted(k for k in set(config) | set(previous)
                             if k not in resumable and config.get(k) != previous.get(k))
            if changed and not force:
                raise FxroofError(
                    f"'{root}' holds a different study (it differs in: {', '.join(changed)}), "
                    "and fxroof does not overwrite a study unless asked. Rerun with the same "
                    "settings to resume it, choose another --out, or pass --force to start it "
                    "over with the new settings (every result is recomputed).")
    elif os.path.isdir(root) and os.listdir(root) and not force:
        raise FxroofError(f"'{root}' exists and is not an fxroof study folder; fxroof will not "
                          "write into it. Choose a new or empty --out, or pass --force.")
    make_folder(root, "the study folder")
    write_json(manifest, config)


def read_manifest(root: str) -> dict:
    path = os.path.join(root, MANIFEST)
    if not os.path.exists(path):
        raise FxroofError(f"'{root}' holds no study ({MANIFEST} is missing): run `fxroof study "
                          f"--out {root}` first; --report-only only redraws a finished or "
                          "interrupted study.")
    try:
        data = _read(path)
    except FxroofError as e:
        raise FxroofError(f"{e}. Run the study again with --force to start it over.") from None
    if not isinstance(data, dict):
        raise FxroofError(f"'{path}' does not hold a study's settings: pass --force to start "
                          "the study over.")
    return data


def _read(path: str):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FxroofError(f"'{path}' is damaged ({type(e).__name__}: {e})") from None


@contextlib.contextmanager
def locked(root: str):
    """Hold ``<root>/.lock`` while a study runs: a second study on the same folder is refused
    at once instead of interleaving its results with this one's."""
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, ".lock"), "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise FxroofError(f"Another fxroof study is running in '{root}'. Wait for it to "
                              "finish, or choose another --out.") from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
