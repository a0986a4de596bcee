"""perfkit: runbooks, analyses and postmortems for performance incidents in LLM serving and training."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
