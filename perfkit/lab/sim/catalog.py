"""Every simulated inference incident by id: the seed's cases (:mod:`perfkit.lab.sim.scenarios`) and
their after-fix runs (:mod:`perfkit.lab.sim.fixed_scenarios`), in that order."""

from __future__ import annotations

from perfkit.lab.sim.fixed_scenarios import AFTER_FIX
from perfkit.lab.sim.scenarios import INCIDENTS

SCENARIOS = {**INCIDENTS, **AFTER_FIX}
