"""The real servers the integration tests start, and one way to treat a missing one."""

from __future__ import annotations

import shutil

import pytest

#: binary -> its Debian package; `make test` installs them, CI fails on any integration skip
SERVERS = {
    "prometheus": "prometheus",
    "promtool": "prometheus",
    "victoria-metrics": "victoria-metrics",
    "prometheus-alertmanager": "prometheus-alertmanager",
}


def require_binary(name: str) -> str:
    """The path of server binary ``name``, or skip the test naming its install command: every test
    treats a missing server the same way (and CI, with PERFKIT_REQUIRE_INTEGRATION, fails on it)."""
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"needs {name}: apt-get install -y --no-install-recommends {SERVERS.get(name, name)}")
    return path
