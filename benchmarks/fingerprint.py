"""Fingerprint perfkit's outputs on every embedded scenario, to prove a refactoring changed nothing.

For each bundle under ``data/scenarios`` it records ``perfkit triage --format json`` and the
``findings.json`` of a ``perfkit run`` (training bundles with the training runbook), with what
legitimately differs between two runs removed (notebook checksum, paths, versions, timings), plus a
sha256 of every bundle file. Only the command line is used, so the same script runs on both sides
of a move::

    python benchmarks/fingerprint.py -o before.json      # on the old layout
    python benchmarks/fingerprint.py -o after.json       # on the new one
    python benchmarks/fingerprint.py --compare before.json after.json

``--bundles DIR`` fingerprints the triage JSON alone of every bundle under ``DIR`` (any depth: e.g. the
variants and dialects ``benchmarks/triage_accuracy.py --variants --dialect ... --out DIR`` kept), so a
change to the triage table is checked on held-out-style tellings too, not only the embedded ones.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = REPO / "data" / "scenarios"
#: what differs between two runs of the same code: checksums, versions, clock times and timings
VOLATILE = {
    "notebook_sha256",
    "perfkit_version",
    "runbook_version",
    "generated",
    "executed_start",
    "executed_end",
    "prepare_s",
    "execute_s",
    "render_s",
    "total_s",
    "duration_s",
    "seconds",
}


def _clean(value, root: str):
    """Drop volatile keys; replace the temporary folder and the checkout's path with placeholders."""
    if isinstance(value, dict):
        return {k: _clean(v, root) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_clean(v, root) for v in value]
    if isinstance(value, str):
        value = value.replace(root, "<tmp>").replace(str(REPO), "<repo>")
        return re.sub(r"\d+(\.\d+)? s\b", "<seconds>", value) if "took" in value else value
    return value


def _runbook(bundle: Path) -> str:
    for om in sorted((bundle / "metrics").glob("*.om")):
        with om.open("r", encoding="utf-8", errors="replace") as fh:
            if "train_step_duration_seconds" in fh.read(1 << 20):
                return "training_step"
    return "inference_latency"


def fingerprint(jobs: int) -> dict:
    perfkit = [sys.executable, "-m", "perfkit"]  # whichever perfkit this interpreter imports
    out: dict = {}
    bundles = sorted(p for p in SCENARIOS.iterdir() if (p / "incident.yaml").exists())
    with tempfile.TemporaryDirectory() as tmp:
        batch = Path(tmp) / "all.yaml"
        batch.write_text("".join(f"- {{bundle: {b}, runbook: {_runbook(b)}}}\n" for b in bundles))
        subprocess.run([*perfkit, "batch", str(batch), "-j", str(jobs), "-o", f"{tmp}/out"], check=False)
        for b in bundles:
            triage = subprocess.run(
                [*perfkit, "triage", "--bundle", str(b), "--format", "json"], capture_output=True, text=True
            )
            findings = Path(tmp) / "out" / b.name / "findings.json"
            out[b.name] = {
                "triage": _clean(json.loads(triage.stdout), tmp) if triage.returncode == 0 else triage.stderr,
                "findings": _clean(json.loads(findings.read_text()), tmp) if findings.exists() else None,
                "bundle": {
                    str(f.relative_to(b)): hashlib.sha256(f.read_bytes()).hexdigest()
                    for f in sorted(b.rglob("*"))
                    if f.is_file()
                },
            }
    return out


def triage_fingerprint(root: Path) -> dict:
    """The triage JSON of every bundle under ``root`` (in this process: the public ``triage_bundle``)."""
    from perfkit.triage import triage_bundle

    out: dict = {}
    for inc in sorted(root.rglob("incident.yaml")):
        name = str(inc.parent.relative_to(root))
        try:
            out[name] = {"triage": _clean(triage_bundle(inc.parent).to_json(), str(root))}
        except Exception as exc:  # a crash is part of the fingerprint
            out[name] = {"triage": f"{type(exc).__name__}: {exc}"}
    return out


def _diff(x, y, path: str) -> list[str]:
    """Where two fingerprints differ: the paths of the first differing leaves, with both values."""
    if isinstance(x, dict) and isinstance(y, dict):
        return [d for k in sorted(set(x) | set(y), key=str) for d in _diff(x.get(k), y.get(k), f"{path}.{k}")]
    if isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
        return [d for i, (u, v) in enumerate(zip(x, y, strict=True)) for d in _diff(u, v, f"{path}[{i}]")]
    return [] if x == y else [f"{path}: {str(x)[:120]!r} -> {str(y)[:120]!r}"]


def compare(a: dict, b: dict) -> int:
    bad = 0
    for name in sorted(set(a) | set(b)):
        for part in ("triage", "findings", "bundle"):
            x, y = (a.get(name) or {}).get(part), (b.get(name) or {}).get(part)
            if x != y:
                bad += 1
                print(f"{name}: {part} differs: {'; '.join(_diff(x, y, part)[:4])}")
    print(f"{len(set(a) | set(b))} scenarios, {bad} differences")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", type=Path)
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--compare", nargs=2, type=Path)
    ap.add_argument("--bundles", type=Path, help="triage JSON only, of every bundle under this folder")
    args = ap.parse_args()
    if args.compare:
        return compare(*(json.loads(p.read_text()) for p in args.compare))
    data = triage_fingerprint(args.bundles) if args.bundles else fingerprint(args.jobs)
    text = json.dumps(data, indent=1, sort_keys=True)
    if args.out:
        args.out.write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
