"""The study's on-disk layout: one JSON file per (device, model, batch, phase) result.

    <out>/study.json                                  what was asked (models, batches, ...)
    <out>/cache/<device>/<model>/b<batch>/<phase>.json one result, or {"error": ...}
    <out>/chips/this-<device>.yaml                     the measured roofs of each device
    <out>/figures/*.png, <out>/data/*.csv|json, <out>/report.md, <out>/report.html

Each result is written to a temporary file and renamed into place, so an interrupted run leaves
only whole results behind and the next run picks up at the first missing one.
"""
from __future__ import annotations

import json
import os
from typing import Optional

from fxroof.errors import FxroofError
from fxroof.files import atomic

MANIFEST = "study.json"


class Cache:
    def __init__(self, root: str):
        self.root = root

    def path(self, device: str, model: str, batch: int, phase: str) -> str:
        safe = model.replace(":", "_").replace("/", "_")
        return os.path.join(self.root, "cache", device.replace(":", "_"), safe, f"b{batch}",
                            f"{phase}.json")

    def get(self, device: str, model: str, batch: int, phase: str) -> Optional[dict]:
        path = self.path(device, model, batch, phase)
        if not os.path.exists(path):
            return None
        with open(path) as f:
            return json.load(f)

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


def claim(root: str, config: dict, force: bool) -> None:
    """Make ``root`` this study's folder: new, or holding this same study (resume). A folder
    with a different study, or with other files, is left alone unless ``force``."""
    manifest = os.path.join(root, MANIFEST)
    if os.path.exists(root) and not os.path.isdir(root):
        raise FxroofError(f"'{root}' is a file, not a folder: --out names the folder the study "
                          "writes into. Choose a new folder name.")
    if os.path.exists(manifest):
        with open(manifest) as f:
            previous = json.load(f)
        if previous != config and not force:
            changed = sorted(k for k in set(config) | set(previous)
                             if config.get(k) != previous.get(k))
            raise FxroofError(
                f"'{root}' holds a different study (it differs in: {', '.join(changed)}), and "
                "fxroof does not overwrite a study unless asked. Rerun with the same settings to "
                "resume it, choose another --out, or pass --force to start it over with the new "
                "settings (every result is recomputed).")
    elif os.path.isdir(root) and os.listdir(root) and not force:
        raise FxroofError(f"'{root}' exists and is not an fxroof study folder; fxroof will not "
                          "write into it. Choose a new or empty --out, or pass --force.")
    os.makedirs(root, exist_ok=True)
    write_json(manifest, config)


def read_manifest(root: str) -> dict:
    path = os.path.join(root, MANIFEST)
    if not os.path.exists(path):
        raise FxroofError(f"'{root}' holds no study ({MANIFEST} is missing): run `fxroof study "
                          f"--out {root}` first; --report-only only redraws a finished or "
                          "interrupted study.")
    with open(path) as f:
        return json.load(f)
