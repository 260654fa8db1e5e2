"""One "did you mean" for every name a user types: models, chips, dtypes, model types."""
from __future__ import annotations

import difflib
from typing import Iterable, Mapping, Optional


def did_you_mean(name: str, known: Iterable[str], n: int = 3, cutoff: float = 0.5,
                 shown: Optional[Mapping[str, str]] = None) -> str:
    """' Did you mean a, b?' for the closest known names, or '' when none is close. ``shown``
    maps a known name to how to write it (a bare timm name -> "timm:name"), so names are
    compared without their prefixes."""
    close = difflib.get_close_matches(str(name), list(known), n=n, cutoff=cutoff)
    close = [shown.get(c, c) for c in close] if shown else close
    return f" Did you mean {', '.join(close)}?" if close else ""
