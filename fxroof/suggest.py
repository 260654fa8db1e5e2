"""One "did you mean" for every name a user types: models, chips, dtypes, model types."""
from __future__ import annotations

import difflib
from typing import Iterable


def did_you_mean(name: str, known: Iterable[str], n: int = 3, cutoff: float = 0.5) -> str:
    """' Did you mean a, b?' for the closest known names, or '' when none is close."""
    close = difflib.get_close_matches(str(name), list(known), n=n, cutoff=cutoff)
    return f" Did you mean {', '.join(close)}?" if close else ""
