"""Fixtures for the report tests (builders live in report_fixtures.py, importable by the tests)."""

from __future__ import annotations

from report_fixtures import full_notebook, write_notebook

__all__ = ["full_notebook", "write_notebook"]
