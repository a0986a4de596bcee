"""The embedded incidents, found the same way from a checkout and from an installed wheel (the
runbooks and templates: :mod:`perfkit.core.resources`).

* ``data/scenarios/<name>`` of a checkout (committed, byte-identical to what
  the simulators write); an installed wheel carries only their seeded specs, and a bundle is
  simulated on first use into the user cache (``$PERFKIT_CACHE`` or ``~/.cache/perfkit/scenarios``),
  written to a temporary folder and renamed into place, so runs in parallel never see half a bundle.
  ``demo`` names the seed's §5.3 incident, ``p95-prefill-interference``.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfkit.core.resources import SCENARIOS
from perfkit.errors import ConfigError

ALIASES = {"demo": "p95-prefill-interference"}
#: the variant bundles the library carries (perfkit.lab.sim.variants; the benchmark generates every
#: scenario's variants on demand): name → (base scenario, variant). Training bundles, the small ones.
VARIANT_BUNDLES = {
    "dataloader-starvation-loose-window": ("dataloader-starvation", "loose-window"),
    "nccl-socket-fallback-shared-fleet": ("nccl-socket-fallback", "shared-fleet"),
    "train-oom-batch-size-restart": ("train-oom-batch-size", "restart"),
}


def base_specs() -> dict[str, tuple[Callable[[], Any], Callable[..., dict[str, float]]]]:
    """The scenarios as the simulators tell them: name → (spec factory, the simulator's bundle writer)."""
    from perfkit.lab.sim.bundle import generate as gen_inference
    from perfkit.lab.sim.catalog import SCENARIOS
    from perfkit.lab.sim.training import generate as gen_training
    from perfkit.lab.sim.training_scenarios import TRAINING_SCENARIOS

    return {
        **{k: (v, gen_inference) for k, v in SCENARIOS.items()},
        **{k: (v, gen_training) for k, v in TRAINING_SCENARIOS.items()},
    }


def specs() -> dict[str, tuple[Callable[[], Any], Callable[..., dict[str, float]]]]:
    """Every embedded scenario: name → (spec factory, bundle writer); a variant bundle's factory is
    its base scenario's and its writer the variant's."""
    from perfkit.lab.sim.variants import variant_writer

    every = base_specs()
    for name, (base, variant) in VARIANT_BUNDLES.items():
        every[name] = (every[base][0], variant_writer(variant))
    return every


def checkout_root() -> Path | None:
    """``data/scenarios`` of a checkout, when perfkit runs from one."""
    return SCENARIOS if scenario_dirs(SCENARIOS) else None


def cache_root() -> Path:
    """The user cache of simulated bundles, one folder per perfkit version (an upgrade that changes a
    simulator never serves the old version's bundles)."""
    from perfkit import __version__

    base = os.environ.get("PERFKIT_CACHE")
    root = Path(base) if base else Path.home() / ".cache" / "perfkit" / "scenarios"
    return root / __version__


def scenario_root() -> Path:
    """Where embedded bundles are: the checkout's folder, else the user cache."""
    return checkout_root() or cache_root()


def is_embedded(name: str) -> bool:
    return ALIASES.get(name, name) in specs()


def embedded_bundle(name: str) -> Path:
    """The bundle of embedded incident ``name`` (or ``demo``), simulated into the cache if needed."""
    name = ALIASES.get(name, name)
    every = specs()
    if name not in every:
        raise ConfigError(f"no embedded incident named {name!r}: choose one of demo, {', '.join(every)}")
    root = checkout_root()
    if root is not None and (root / name / "incident.yaml").is_file():
        return root / name
    target = cache_root() / name
    if (target / "incident.yaml").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    if sys.stderr.isatty():  # a wait of 10-30 s deserves a word; off a terminal, quiet
        print(
            f"perfkit: simulating the embedded incident {name} into {target.parent} (first use, ~20 s)",
            file=sys.stderr,
            flush=True,
        )
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=target.parent))
    try:
        spec, gen = every[name]
        gen(spec(), tmp)
        try:
            os.rename(tmp, target)
        except OSError as exc:  # another run wrote it first: theirs is the same bundle
            if not (target / "incident.yaml").is_file():
                raise ConfigError(f"{target}: cannot store the simulated bundle ({exc.strerror})") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def bundle_path(text: str) -> Path:
    """A ``--bundle`` value: an existing folder as given, else the name of an embedded incident."""
    path = Path(os.path.expanduser(text))
    if path.is_dir():
        return path.resolve()
    # a bare name ("demo", "release-regression"), or the runbooks' default "data/scenarios/<name>"
    if is_embedded(path.name) and (len(path.parts) == 1 or path.parent == Path("data/scenarios")):
        return embedded_bundle(path.name)
    raise ConfigError(
        f"{text}: bundle folder not found (nor an embedded incident: demo, {', '.join(specs())})"
    )


def replay_source(text: str, option: str = "--replay") -> Path:
    """A replay's source: a request log or bundle folder as given, else an embedded incident's name
    (``demo``), the same names ``--bundle`` takes."""
    path = Path(os.path.expanduser(text))
    if path.exists():
        return path
    if is_embedded(path.name) and len(path.parts) == 1:
        return embedded_bundle(path.name)
    raise ConfigError(
        f"{option} {text}: no such request log or bundle folder (nor an embedded incident: demo, "
        f"{', '.join(specs())})"
    )


def scenario_dirs(root: Path) -> list[Path]:
    """The scenario bundles under ``root``: the folders that hold an answer key."""
    return sorted(p.parent for p in root.glob("*/answer.yaml"))
