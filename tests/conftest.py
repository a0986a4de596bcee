from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = REPO / "data" / "scenarios"

# papermill/nbformat pull a slow optional import; perfkit.run documents why this is safe.
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]


@pytest.fixture
def scenario_copy(tmp_path):
    """Copy an embedded scenario so a test may break it."""

    def make(name: str) -> Path:
        dst = tmp_path / name
        shutil.copytree(SCENARIOS / name, dst)
        return dst

    return make
