"""Benchmark scripts (run as `python benchmarks/<script>.py`); ``script_main`` is their one
way to end: the exit status main returns, a clear error as one line, Ctrl-C as 130."""
from __future__ import annotations

import os
import sys
from typing import Callable

from fxroof.errors import FxroofError


def script_main(main: Callable[[], int], path: str) -> None:
    """Run a script's ``main`` and exit. Outputs are written last and atomically, so an
    error or an interrupt leaves nothing half-written."""
    name = os.path.basename(path)
    try:
        sys.exit(main())
    except FxroofError as e:
        sys.exit(f"{name}: error: {e}")
    except KeyboardInterrupt:
        print(f"{name}: interrupted: nothing written", file=sys.stderr)
        sys.exit(130)
