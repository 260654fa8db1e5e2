"""One "did you mean" for every name a user types: models, chips, dtypes, model types."""
from __future__ import annotations

import difflib
from typing import Iterable, Mapping, Optional


def did_you_mean(name: str, known: Iterable[str], n: int = 3, cutoff: float = 0.5,
                 shown: Optional[Mapping[str, str]] = None) -> str:
    """' Did you mean a, b?' for the closest known names, or '' when none is close. ``shown``
    maps a known name to how to write it (a bare timm name -> "timm:name"), so names are
    compared without their prefixes."""
    known = list(known)
    typed = str(name)
    # a name typed as the start of a known one ("h100" for h100_sxm) is what was meant, ahead
    # of names merely spelled alike ("mi100")
    started = sorted((k for k in known if typed and k.lower().startswith(typed.lower())),
                     key=len)
    # among names spelled alike, those with the typed first letter first: a slip rarely
    # changes it ("h10O" is h100_sxm before a10)
    alike = sorted(difflib.get_close_matches(typed, known, n=n, cutoff=cutoff),
                   key=lambda k: k[:1].lower() != typed[:1].lower())
    close = list(dict.fromkeys(started + alike))[:n]
    close = [shown.get(c, c) for c in close] if shown else close
    return f" Did you mean {', '.join(close)}?" if close else ""
