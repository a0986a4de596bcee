"""A fleet's evidence for tests: an embedded bundle plus a second model on another host, in the same
metric families (as a fleet-wide Prometheus holds them)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

SCENARIOS = Path(__file__).resolve().parents[1] / "data" / "scenarios"
NAME = "decode-thermal-throttle"
MODEL, HOST = "qwen3-32b", "assist-api-0"
OTHER_MODEL, OTHER_HOST = "llama-3.1-8b", "other-0"


def _copy_with(line: str, model: str, host: str) -> str:
    """A sample line as the same exporter on another host (serving another model) would write it."""
    line = line.replace(f'model_name="{MODEL}"', f'model_name="{model}"')
    line = line.replace(f'Hostname="{HOST}"', f'Hostname="{host}"')
    return re.sub(r'instance="[^":]*(:\d+)?"', lambda m: f'instance="{host}{m.group(1) or ""}"', line)


def fleet_bundle(tmp: Path) -> Path:
    """The embedded bundle plus a second model on host other-0, in the same files and families.
    vLLM series get the ``instance`` label a Prometheus scrape adds."""
    out = tmp / "fleet"
    shutil.copytree(SCENARIOS / NAME, out)
    for om in sorted((out / "metrics").glob("*.om")):
        lines = om.read_text().splitlines()
        samples = [ln for ln in lines if ln and not ln.startswith("#")]
        if om.name == "vllm.om":
            samples = [re.sub(r"\{", f'{{instance="{HOST}:8000",', ln, count=1) for ln in samples]
        meta = [ln for ln in lines if ln.startswith("#") and ln != "# EOF"]
        other = [_copy_with(ln, OTHER_MODEL, OTHER_HOST) for ln in samples]
        om.write_text("\n".join([*meta, *samples, *other, "# EOF"]) + "\n")
    return out
