"""Public names of a package, imported when first used (PEP 562), so ``from perfkit.sources import
load_bundle`` works without every package importing all of its modules (and their libraries) up front.

::

    __all__ = ["load_bundle"]
    __getattr__, __dir__ = lazy_exports(__name__, {"load_bundle": "perfkit.sources.bundle"})
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, names: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: each name in ``names`` comes from its module."""

    def getattr_(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    def dir_() -> list[str]:
        return sorted(names)

    return getattr_, dir_
