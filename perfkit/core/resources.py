"""Where the files perfkit ships are: ``runbooks/`` and ``templates/`` of a checkout, or, in an
installed wheel, its data files under ``<prefix>/share/perfkit/`` (pip, pipx, a virtualenv, ``--user``)."""

from __future__ import annotations

import site
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # the checkout (site-packages' parent when installed)
SCENARIOS = REPO / "data" / "scenarios"  # a checkout's embedded incidents


def shipped(kind: str) -> Path:
    """The folder of shipped ``runbooks`` or ``templates``: the checkout's, else the installed data files."""
    candidates = [REPO / kind, Path(sys.prefix) / "share" / "perfkit" / kind]
    if site.USER_BASE:
        candidates.append(Path(site.USER_BASE) / "share" / "perfkit" / kind)
    for path in candidates:
        if path.is_dir():
            return path
    return candidates[0]
