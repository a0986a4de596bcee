"""The load generator's targets (issue 10, "Targets"), measured side by side in one run.

Against ``perfkit lab serve`` (perfkit.lab.serve: true TTFT 50 ms, 10 ms per token, 128-word
prompts, 64 output tokens), every client run a child process as a user runs it:

1. **Accuracy** at 64 concurrent streams (``perfkit bench --concurrency 64``), with 1 and with 4
   tokens per chunk: p50 and p99 TTFT error against the truth (target: within 2 ms) and the median
   per-token ITL error (target: within 1 ms). With K tokens per chunk the server sends a chunk when
   its last token is due, so the true TTFT is 50 + (K-1)*10 ms and the true per-token ITL stays
   10 ms (a chunk of K tokens after a K*10 ms gap counts as K tokens of 10 ms: reference/loadtest.md
   section 6). The TTFT targets judge the *client's own* error. The server logs, for every request,
   when it read it and when it wrote its first chunk (``--timing-log``, under the client's
   ``X-Request-Id``), on CLOCK_MONOTONIC, the clock the client's records are on (their origin is
   in the result's ``meta.clock_origin_s``). Request by request, the client's read of the first
   chunk minus the server's write of it is the client's own error ("own"; loopback included), and
   the client's write of the request to the server's read of it is the server's read queue, printed
   beside it. The error against the configured truth carries both: with 64 lock-step streams the
   one-core server reads and answers 64 requests at once.
2. **Capacity**: the highest concurrency (and the request rate it achieved) at which that accuracy
   still holds, for ``perfkit bench`` and for guidellm (installed by this script into its own
   virtualenv under ~/.cache/perfkit-bench, reused once complete; skipped with a message when it
   cannot be installed or run). Target: perfkit at least 3x guidellm's rate. Also under issue 10
   item 3's validity rule (the client's error under 10 % of the median TTFT and ITL), which a
   noisy machine does not decide on its own.
3. **Memory**: peak RSS of a 100,000-request ``perfkit bench`` (64 output tokens, 1 ms TTFT and
   ITL, 64 streams): under 300 MB, because records stream to disk and the summary counts per-chunk
   gaps into fixed histograms. Then (3b) the same records through perfkit bench's last step alone
   (the summary of the records, written here).

How it is measured, and why:

* The server is pinned to the first CPU this process may use and every client to the second, when
  there are two (as reference/loadtest.md section 5.5 was measured); the output says which.
* Errors come from the per-request records (``<stem>.requests.parquet``; guidellm: its per-request
  timings, and its per-request ITL, which perfkit calls TPOT). The first round of requests (the
  first ``concurrency`` sent, which open the connections) is a warm-up and is left out of the
  judged numbers; the p99 over every request is printed beside them, and so is what perfkit bench
  itself printed.
* Other work on these cores only ever adds latency, so a level holds a rule when one of its
  attempts (``--attempts``, 3 by default) does; a level stops at its first attempt that holds the
  strictest rule still in play, and the ladder stops at a level where even the 10 % rule fails.
  Every attempt is printed with the client's CPU per wall second (its start-up included), the share
  of the server's chunks sent over 2 ms late (its ``perfkit_lab_serve_chunk_lateness_seconds``;
  for guidellm over the whole invocation, all levels) and the share of the run some task waited
  for a CPU (/proc/pressure/cpu): together they tell a client limit from the server's or the
  machine's.

Usage: ``python benchmarks/loadgen_bench.py [--quick] [--skip-guidellm] [--attempts N]
[--cache-dir DIR] [--work DIR]``. A full run takes about 20 minutes (plus guidellm's first
install, about 6 GB); ``--quick`` about 3. Everything listens on and connects to 127.0.0.1 only;
every process started here is stopped by its PID (guidellm by its own session's process group).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from perfkit.lab.serve import WORDS, serving

TTFT_MS, ITL_MS = 50.0, 10.0
PROMPT_TOKENS, OUTPUT_TOKENS = 128, 64
ACCURACY_STREAMS = 64
TTFT_TOL_MS = 2.0  # issue 10: p50 and p99 TTFT within 2 ms of the truth
ITL_TOL_MS = 1.0  # issue 10: ITL median within 1 ms
SERVER_LATE_MS = 2.0
MIN_JUDGED = 30
"""Requests judged per capacity level at least (after the warm-up round): below that a p99 is the
maximum of a handful."""
CAPACITY_RATIO = 3.0  # issue 10: perfkit at least 3x guidellm's rate
RSS_LIMIT_MB = 300.0  # issue 10: a 100,000-request run under 300 MB
MODEL = "perfkit-lab"
INSTALL_TIMEOUT_S = 1800.0
GUIDELLM_SPEC = "guidellm"
LATENESS = "perfkit_lab_serve_chunk_lateness_seconds_bucket"
MAX_METRICS_BYTES = 4 * 2**20

# The measured child runs under this small go-between so that its peak RSS is its own: Linux
# carries the forking process's high-water mark into the child's ru_maxrss over fork+exec.
_MEASURE = """
import json, resource, subprocess, sys, time
t = time.perf_counter()
try:
    p = subprocess.run(sys.argv[2:], stdin=subprocess.DEVNULL, capture_output=True, timeout=float(sys.argv[1]))
    rc, out, err = p.returncode, p.stdout, p.stderr
except subprocess.TimeoutExpired as exc:
    rc, out, err = 124, exc.stdout or b"", (exc.stderr or b"") + b"timed out"
wall = time.perf_counter() - t
ru = resource.getrusage(resource.RUSAGE_CHILDREN)  # ru_maxrss: KiB on Linux
print(json.dumps({"rc": rc, "wall_s": wall, "rss_mb": ru.ru_maxrss * 1024 / 1e6, "cpu_s": ru.ru_utime + ru.ru_stime,
                  "out": out[-4000:].decode(errors="replace"), "err": err[-2000:].decode(errors="replace")}))
"""

# perfkit bench's last step alone, over records written here: its peak RSS with long outputs.
_SUMMARY = """
import sys
import perfkit.app.cli.main, perfkit.loadgen.bench  # what perfkit bench has loaded by then
from perfkit.loadgen.summary import summarise
doc = summarise(sys.argv[1], 100.0)
print(doc["completed"], doc["median_itl_ms"])
"""

_TOKENIZER = """
import sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast
tok = Tokenizer(models.BPE(unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tok.train_from_iterator([sys.argv[2]] * 20, trainer)
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
fast.save_pretrained(sys.argv[1])
"""


# ---------------------------------------------------------------------------------------------
# the machine


def cpu_split() -> tuple[set[int] | None, set[int] | None, str]:
    """(server CPUs, client CPUs, a sentence): one core each when there are two or more."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cpus) >= 2:
        return (
            {cpus[0]},
            {cpus[1]},
            f"server pinned to CPU {cpus[0]}, client to CPU {cpus[1]} ({len(cpus)} CPUs)",
        )
    return None, None, f"not pinned ({len(cpus) or os.cpu_count()} CPU): server and client share it"


def cpu_wait_total() -> float | None:
    """Microseconds some task has waited for a CPU since boot (/proc/pressure/cpu), else None."""
    try:
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
        return float(line.rsplit("total=", 1)[1])
    except (OSError, IndexError, ValueError):
        return None


def _pin(cpus: set[int] | None):
    if not cpus or not hasattr(os, "sched_setaffinity"):
        return None
    return lambda: os.sched_setaffinity(0, cpus)


def measure(argv: list[str], cpus: set[int] | None, timeout_s: float) -> dict[str, Any]:
    """Run ``argv`` (pinned to ``cpus``) under the go-between; its wall time, peak RSS, output."""
    w0 = cpu_wait_total()
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(timeout_s), *argv],
        capture_output=True,
        text=True,
        preexec_fn=_pin(cpus),
        timeout=timeout_s + 60,
        check=True,
    )
    result = json.loads(proc.stdout)
    w1 = cpu_wait_total()
    result["cpu_wait"] = (w1 - w0) / 1e6 / result["wall_s"] if w0 is not None and w1 is not None else None
    return result


# ---------------------------------------------------------------------------------------------
# the server's own lateness


def lateness_buckets(url: str) -> dict[float, float]:
    """The server's cumulative chunk-lateness histogram (seconds -> chunks)."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:  # noqa: S310 - 127.0.0.1 only
        text = resp.read(MAX_METRICS_BYTES).decode("utf-8", "replace")
    out: dict[float, float] = {}
    for m in re.finditer(rf'^{LATENESS}\{{[^}}]*le="([^"]+)"\}} (\S+)$', text, re.M):
        out[float(m.group(1))] = float(m.group(2))
    return out


def late_share(before: dict[float, float], after: dict[float, float], over_s: float) -> float | None:
    """Share of the chunks sent between two scrapes that left more than ``over_s`` late."""
    total = after.get(math.inf, 0.0) - before.get(math.inf, 0.0)
    bound = min((b for b in after if b >= over_s), default=None)
    if total <= 0 or bound is None:
        return None
    return 1.0 - (after[bound] - before.get(bound, 0.0)) / total


# ---------------------------------------------------------------------------------------------
# one run's numbers


@dataclass
class Run:
    tool: str
    streams: int
    attempt: int
    completed: int = 0
    failed: int = 0
    req_s: float = math.nan
    ttft_p50: float = math.nan  # errors against the truth, ms, warm-up excluded
    ttft_p99: float = math.nan
    itl_p50: float = math.nan
    ttft_p99_all: float = math.nan  # every request
    # the client's own TTFT error: its TTFT minus the server's for the same request (X-Request-Id),
    # the server's measured from the request's arrival to its first chunk's write (--timing-log)
    own_p50: float = math.nan
    own_p99: float = math.nan
    to_server_p99: float = math.nan  # the client's write to its socket -> the server's read of it, ms
    reported: dict[str, Any] = field(default_factory=dict)  # what the tool itself printed
    server_late: float | None = None
    cpu_wait: float | None = None
    client_cpu: float | None = None  # the client's CPU seconds per wall second (its start-up included)
    wall_s: float = math.nan
    rss_mb: float = math.nan
    problem: str = ""
    judged: int = 0  # completed requests after the warm-up round

    def ttft_errors(self) -> tuple[float, float]:
        """The TTFT errors the targets judge: the client's own where the server logged its side,
        else against the configured truth (which then carries the server's lateness too)."""
        if math.isfinite(self.own_p99):
            return self.own_p50, self.own_p99
        return self.ttft_p50, self.ttft_p99

    def holds(self) -> bool:
        p50, p99 = self.ttft_errors()
        return (
            not self.problem
            and self.failed == 0
            and abs(p50) <= TTFT_TOL_MS
            and abs(p99) <= TTFT_TOL_MS
            and abs(self.itl_p50) <= ITL_TOL_MS
        )

    def badness(self) -> float:
        """How far outside the targets (0 when inside): picks the best of a level's attempts."""
        p50, p99 = self.ttft_errors()
        if self.problem or not math.isfinite(p99):
            return math.inf
        return max(abs(p50) / TTFT_TOL_MS, abs(p99) / TTFT_TOL_MS, abs(self.itl_p50) / ITL_TOL_MS)

    def row(self) -> str:
        if self.problem:
            return f"  {self.tool:8s} {self.streams:5d} #{self.attempt}  {self.problem}"
        late = "-" if self.server_late is None else f"{self.server_late:.1%}"
        wait = "-" if self.cpu_wait is None else f"{self.cpu_wait:.0%}"
        cpu = "-" if self.client_cpu is None else f"{self.client_cpu:.0%}"
        held = "targets" if self.holds() else "10 %" if ten_percent(self) else "no"
        fail = f"  {self.failed} failed" if self.failed else ""
        return (
            f"  {self.tool:8s} {self.streams:5d} #{self.attempt} {self.req_s:7.1f} {self.ttft_p50:+8.2f} "
            f"{self.ttft_p99:+8.2f} {self.ttft_p99_all:+8.2f} {self.own_p50:+7.2f} {self.own_p99:+7.2f} "
            f"{self.itl_p50:+7.2f} {cpu:>6s} {late:>6s} {wait:>5s}  {held}{fail}"
        )


HEADER = (
    "  tool     streams #  req/s  TTFT p50  TTFT p99  p99 all own p50 own p99  ITL p50 client server  wait  holds\n"
    "                            error ms  error ms  error ms      ms      ms error ms    cpu   late   cpu"
)


def weighted_median(values: np.ndarray, weights: np.ndarray) -> float:
    if not values.size:
        return math.nan
    order = np.argsort(values)
    cum = np.cumsum(weights[order])
    return float(values[order][np.searchsorted(cum, 0.5 * cum[-1])])


def server_times(timing_log: Path | None, prefix: str) -> dict[int, tuple[float, float]]:
    """Each request's arrival and first write on the server (CLOCK_MONOTONIC s), by its number in
    the run (``perfkit-<run>-<i>``)."""
    out: dict[int, tuple[float, float]] = {}
    if timing_log is None or not timing_log.is_file():
        return out
    with timing_log.open(encoding="utf-8") as fh:
        for line in fh:
            rid, arrived, written = (line.rstrip("\n").split("\t") + ["", ""])[:3]
            if rid.startswith(prefix) and rid[len(prefix) :].isdigit():
                out[int(rid[len(prefix) :])] = (float(arrived), float(written))
    return out


def judge_records(
    run: Run,
    path: Path,
    warmup: int,
    truth_ttft_ms: float,
    server: dict[int, tuple[float, float]] | None = None,
    origin_s: float | None = None,
) -> None:
    """Fill ``run``'s errors from perfkit's per-request records (and the server's TTFTs, by request)."""
    table = pq.read_table(path, columns=["i", "sent_s", "ttft_s", "gaps_s", "chunk_tokens", "error"])
    sent = table.column("sent_s").to_numpy()
    ttft = table.column("ttft_s").to_numpy() * 1e3
    ok = np.array([e is None for e in table.column("error").to_pylist()])
    order = np.argsort(sent, kind="stable")
    steady = np.zeros(len(sent), dtype=bool)
    steady[order[warmup:]] = True
    keep = ok & steady
    run.ttft_p99_all = float(np.percentile(ttft[ok], 99)) - truth_ttft_ms if ok.any() else math.nan
    if not keep.any():
        run.problem = "no completed request after the warm-up round"
        return
    run.judged = int(keep.sum())
    run.ttft_p50 = float(np.percentile(ttft[keep], 50)) - truth_ttft_ms
    run.ttft_p99 = float(np.percentile(ttft[keep], 99)) - truth_ttft_ms
    if server:
        ids = table.column("i").to_numpy()
        times = np.array([server.get(int(i), (math.nan, math.nan)) for i in ids])
        both = keep & np.isfinite(times[:, 0])
        if both.sum() >= 0.9 * keep.sum():  # (a server that missed requests would bias this)
            # without the clock origin: the client's TTFT minus the server's (arrival to first write),
            # which leaves the client's share and the time its request waited to be read by the server
            own = ttft[both] - (times[both, 1] - times[both, 0]) * 1e3
            if origin_s is not None:  # one clock: split the two at the server's read and write
                sent_abs = origin_s + sent[both]
                to_server = (times[both, 0] - sent_abs) * 1e3
                run.to_server_p99 = float(np.percentile(to_server, 99))
                own = (sent_abs + ttft[both] / 1e3 - times[both, 1]) * 1e3  # first write -> client's read
            run.own_p50, run.own_p99 = float(np.percentile(own, 50)), float(np.percentile(own, 99))
    gaps = table.column("gaps_s").to_pylist()
    tokens = table.column("chunk_tokens").to_pylist()
    vals, weights = [], []
    for j in np.flatnonzero(keep):
        g, k = np.asarray(gaps[j], dtype=float), np.asarray(tokens[j], dtype=float)
        vals.append(g * 1e3 / np.maximum(k, 1))
        weights.append(np.maximum(k, 1))
    run.itl_p50 = weighted_median(np.concatenate(vals), np.concatenate(weights)) - ITL_MS


# ---------------------------------------------------------------------------------------------
# perfkit bench


def perfkit_run(
    url: str,
    streams: int,
    n: int,
    work: Path,
    cpus: set[int] | None,
    *,
    attempt: int = 1,
    k: int = 1,
    output_tokens: int = OUTPUT_TOKENS,
    judge: bool = True,
    timing_log: Path | None = None,
) -> Run:
    out = work / f"perfkit-c{streams}-k{k}-n{n}-{attempt}.json"
    argv = [sys.executable, "-m", "perfkit", "bench", "--url", url, "--model", MODEL]
    argv += ["--concurrency", str(streams), "--num-requests", str(n)]
    argv += ["--prompt-tokens", str(PROMPT_TOKENS), "--output-tokens", str(output_tokens)]
    argv += ["--no-calibrate", "--quiet", "--force", "-o", str(out)]
    run = Run("perfkit", streams, attempt)
    before = lateness_buckets(url)
    m = measure(argv, cpus, timeout_s=max(120.0, n / 20))
    run.server_late = late_share(before, lateness_buckets(url), SERVER_LATE_MS / 1e3)
    run.wall_s, run.rss_mb, run.cpu_wait = m["wall_s"], m["rss_mb"], m["cpu_wait"]
    run.client_cpu = m["cpu_s"] / m["wall_s"]
    if m["rc"] != 0:
        run.problem = f"perfkit bench failed (rc {m['rc']}): {_last_line(m['err'])}"
        return run
    doc = json.loads(out.read_text())
    run.completed, run.failed = doc["completed"], doc["failed"]
    run.req_s = doc["request_throughput"]
    run.reported = {
        "p50_ttft_ms": doc["percentiles"]["ttft_ms"]["50"],
        "p99_ttft_ms": doc["percentiles"]["ttft_ms"]["99"],
        "median_itl_ms": doc["median_itl_ms"],
        "median_itl_chunk_ms": (doc["percentiles"].get("itl_chunk_ms") or {}).get("50"),
        "tokens_per_chunk": (doc.get("tokens_per_chunk") or {}).get("mean"),
    }
    if judge:
        prefix = str(doc["meta"].get("request_ids", "")).removesuffix("<i>")
        server = server_times(timing_log, prefix) if prefix else {}
        origin = doc["meta"].get("clock_origin_s")
        judge_records(run, out.with_name(doc["records"]), streams, TTFT_MS + (k - 1) * ITL_MS, server, origin)
    return run


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "no output"


# ---------------------------------------------------------------------------------------------
# guidellm


class Skipped(Exception):
    """guidellm cannot be run here; the message says why (one line)."""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "perfkit-bench"


def _run_logged(argv: list[str], log: Path, timeout_s: float, env: dict[str, str] | None = None) -> None:
    with log.open("ab") as fh:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        try:
            rc = proc.wait(timeout=max(timeout_s, 1.0))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: pip and any build it started
            proc.wait()
            raise Skipped(f"{Path(argv[0]).name} timed out after {timeout_s:.0f} s (log: {log})") from None
    if rc != 0:
        tail = _last_line(log.read_bytes()[-2000:].decode(errors="replace"))
        raise Skipped(f"{Path(argv[0]).name} {' '.join(argv[1:3])} failed (rc {rc}): {tail} (log: {log})")


def install_guidellm(root: Path, timeout_s: float = INSTALL_TIMEOUT_S) -> tuple[Path, Path]:
    """guidellm in its own virtualenv under ``root`` (reused once complete) and a tiny local
    tokenizer for it (offline: reference/loadtest.md section 5.2); (the executable, the folder)."""
    venv = root / "guidellm-venv"
    exe, py = venv / "bin" / "guidellm", venv / "bin" / "python"
    tokdir, done = root / "guidellm-tokenizer", venv / ".perfkit-complete"
    root.mkdir(parents=True, exist_ok=True)
    log = root / "guidellm-install.log"
    if not done.exists():
        t = time.perf_counter()
        print(f"guidellm: installing into {venv} (pulls torch, about 6 GB; log {log})", flush=True)
        _run_logged([sys.executable, "-m", "venv", "--clear", str(venv)], log, 300)
        left = timeout_s - (time.perf_counter() - t)
        _run_logged([str(py), "-m", "pip", "install", "--quiet", GUIDELLM_SPEC], log, left)
        if not exe.exists():
            raise Skipped(f"guidellm installed but {exe} is missing (log: {log})")
        done.write_text("ok\n")
        print(f"guidellm: installed in {time.perf_counter() - t:.0f} s", flush=True)
    if not (tokdir / "tokenizer.json").exists():
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        _run_logged([str(py), "-c", _TOKENIZER, str(tokdir), " ".join(WORDS)], log, 300, env=env)
    return exe, tokdir


def guidellm_runs(
    exe: Path,
    tokenizer: Path,
    url: str,
    levels: list[int],
    seconds: float,
    work: Path,
    cpus: set[int] | None,
    attempt: int,
) -> list[Run]:
    """One ``guidellm run`` over ``levels`` concurrent streams (one sub-benchmark each, ``seconds``
    long), on the completions endpoint as perfkit's runs; a Run per level."""
    out = work / f"guidellm-{attempt}.json"
    backend = f"kind=openai_http,target={url},model={MODEL},request_format=/v1/completions"
    argv = [str(exe), "run", "--backend", backend, "--tokenizer", f"kind=huggingface_auto,model={tokenizer}"]
    argv += ["--data", f"kind=synthetic_text,prompt_tokens={PROMPT_TOKENS},output_tokens={OUTPUT_TOKENS}"]
    argv += ["--profile", f"kind=concurrent,streams={levels[0]}"]
    argv += ["--override", "profile.streams", ",".join(map(str, levels))]
    argv += ["--constraint", f"kind=max_duration,seconds={seconds:g}"]
    argv += ["--output", f"kind=json,path={out}", "--disable-console-interactive"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    timeout_s = 300 + len(levels) * (seconds + 90)
    log = work / f"guidellm-{attempt}.log"
    before = lateness_buckets(url)
    w0, t, ru0 = cpu_wait_total(), time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=_pin(cpus),
            start_new_session=True,
        )
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: guidellm and its workers
            proc.wait()
            rc = 124
    wall, w1, ru1 = time.perf_counter() - t, cpu_wait_total(), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)  # guidellm and its workers
    after = lateness_buckets(url)
    if rc != 0 or not out.exists():
        tail = _last_line(log.read_bytes()[-2000:].decode(errors="replace"))
        return [Run("guidellm", s, attempt, problem=f"guidellm failed (rc {rc}): {tail}") for s in levels]
    try:
        benches = json.loads(out.read_text())["benchmarks"]
        levels_run = [int(b["config"]["strategy"]["streams"]) for b in benches]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [
            Run("guidellm", s, attempt, problem=f"unexpected guidellm output {out}: {exc!r}") for s in levels
        ]
    runs = []
    for bench, level in zip(benches, levels_run, strict=True):
        run = Run("guidellm", level, attempt)
        try:
            judge_guidellm(run, bench)
        except (KeyError, TypeError, ValueError) as exc:
            run.problem = f"unexpected guidellm output {out}: {exc!r}"
        run.wall_s, run.client_cpu = wall, cpu_s / wall  # over the whole invocation
        run.cpu_wait = (w1 - w0) / 1e6 / wall if w0 is not None and w1 is not None else None
        # the server's lateness over the whole invocation (its sub-benchmarks run back to back)
        run.server_late = late_share(before, after, SERVER_LATE_MS / 1e3)
        runs.append(run)
    return runs


def judge_guidellm(run: Run, bench: dict[str, Any]) -> None:
    """Errors from guidellm's per-request timings: TTFT = first token - request start; its ITL is
    per request, (last token - first token) / (tokens - 1) (reference/loadtest.md section 6: what
    perfkit calls TPOT), the closest it has to a per-token ITL."""
    reqs = bench.get("requests") or {}
    ok = reqs.get("successful") or []
    run.completed = len(ok)
    run.failed = len(reqs.get("errored") or [])
    rps = ((bench.get("metrics") or {}).get("requests_per_second") or {}).get("successful") or {}
    run.req_s = float(rps.get("mean", math.nan))
    rows = []
    for r in ok:
        tm = r["info"]["timings"]
        start, first, last = (
            tm.get("request_start"),
            tm.get("first_token_iteration"),
            tm.get("last_token_iteration"),
        )
        n = (r.get("output_metrics") or {}).get("text_tokens") or 0
        if start is None or first is None or last is None:
            continue
        rows.append((start, (first - start) * 1e3, (last - first) * 1e3 / (n - 1) if n > 1 else math.nan))
    rows.sort()
    ttft_all = np.array([r[1] for r in rows])
    steady = rows[run.streams :]
    run.judged = len(steady)
    if not steady:
        run.problem = "no completed request after the warm-up round"
        return
    ttft, itl = np.array([r[1] for r in steady]), np.array([r[2] for r in steady])
    run.ttft_p99_all = float(np.percentile(ttft_all, 99)) - TTFT_MS
    run.ttft_p50 = float(np.percentile(ttft, 50)) - TTFT_MS
    run.ttft_p99 = float(np.percentile(ttft, 99)) - TTFT_MS
    run.itl_p50 = float(np.nanmedian(itl)) - ITL_MS
    ttft_ms = (bench.get("metrics") or {}).get("time_to_first_token_ms", {}).get("successful", {})
    run.reported = {
        "mean_ttft_ms": ttft_ms.get("mean"),
        "p99_ttft_ms": (ttft_ms.get("percentiles") or {}).get("p99"),
    }


# ---------------------------------------------------------------------------------------------
# ladders and verdicts


def strict(run: Run) -> bool:
    return run.holds()


def ten_percent(run: Run) -> bool:
    """Issue 10 item 3's validity rule: the client's error under 10 % of the true median TTFT and
    ITL (no p99 term: the rule is about the client's overhead, which the median carries)."""
    return (
        not run.problem
        and run.failed == 0
        and abs(run.ttft_p50) <= 0.1 * TTFT_MS
        and abs(run.itl_p50) <= 0.1 * ITL_MS
    )


RULES = {"issue targets": strict, "10 % rule": ten_percent}


Attempts = dict[int, list[Run]]  # level -> its runs


def holds_at(runs: list[Run], rule) -> Run | None:
    """The level's attempt that holds ``rule`` (the best such), else None: interference from other
    work only adds latency, so one attempt inside the targets shows what the client can do."""
    good = [r for r in runs if rule(r)]
    return min(good, key=Run.badness) if good else None


def capacity(tried: Attempts, rule) -> Run | None:
    """The run at the highest level below which (itself included) every level holds ``rule``."""
    top = None
    for level in sorted(tried):
        run = holds_at(tried[level], rule)
        if run is None:
            break
        top = run
    return top


def in_play(tried: Attempts, level: int):
    """The strictest rule that can still decide a capacity at ``level``: the issue's targets while
    every level below holds them, else the 10 % rule."""
    below = [lv for lv in tried if lv < level]
    return strict if all(holds_at(tried[lv], strict) for lv in below) else ten_percent


def perfkit_ladder(
    url: str, levels: list[int], rounds: int, work: Path, cpus, attempts: int, first: list[Run]
) -> Attempts:
    """Raise the concurrency until a level fails even the 10 % rule in all its attempts (a level
    stops at its first attempt that holds the rule in play); then, while a rule holds at no level,
    halve the concurrency below the first level until one holds it, so that both rules have a
    capacity to compare with guidellm's.
    The accuracy part's runs are the first level's (they had their own attempts)."""
    tried: Attempts = {first[0].streams: list(first)}
    for run in first:
        print(run.row(), flush=True)

    def level_runs(level: int, rule=None) -> None:
        tried[level] = []
        for attempt in range(1, attempts + 1):
            n = max(level * rounds, level + MIN_JUDGED)
            run = perfkit_run(url, level, n, work, cpus, attempt=attempt)
            print(run.row(), flush=True)
            tried[level].append(run)
            if (rule or in_play(tried, level))(run):
                break

    for level in levels:
        if level not in tried:
            level_runs(level)
        if holds_at(tried[level], ten_percent) is None:
            break
    level = min(tried)
    while level > 1 and (lacking := [r for r in RULES.values() if capacity(tried, r) is None]):
        level //= 2
        level_runs(level, lacking[0])  # the strictest rule without a capacity yet
    return tried


def guidellm_ladder(
    exe: Path, tok: Path, url: str, levels: list[int], seconds: float, work: Path, cpus, attempts: int
) -> Attempts:
    """Every level in one guidellm invocation (its setup takes most of a minute); then retries of
    the lowest level failing each rule, which decide the capacities."""
    tried: Attempts = {}
    todo = levels
    for attempt in range(1, attempts + 1):
        for run in guidellm_runs(exe, tok, url, todo, seconds, work, cpus, attempt):
            print(run.row(), flush=True)
            tried.setdefault(run.streams, []).append(run)
        todo = []
        for rule in RULES.values():
            failing = [lv for lv in sorted(tried) if holds_at(tried[lv], rule) is None]
            if failing and failing[0] not in todo:
                todo.append(failing[0])
        if not todo:
            break
    return tried


def verdict(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


# ---------------------------------------------------------------------------------------------
# main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller runs: a smoke check (minutes)")
    ap.add_argument("--skip-guidellm", action="store_true", help="perfkit's numbers only")
    ap.add_argument("--attempts", type=int, default=3, help="runs per level at most (best one stands)")
    ap.add_argument(
        "--cache-dir", type=Path, default=None, help="guidellm's venv (default ~/.cache/perfkit-bench)"
    )
    ap.add_argument("--work", type=Path, default=None, help="keep results here (default: a temp folder)")
    args = ap.parse_args()
    if not 1 <= args.attempts <= 10:
        ap.error("--attempts must be 1 to 10")
    q = args.quick
    n_accuracy = ACCURACY_STREAMS * (10 if q else 40)
    levels = [64, 128, 256] if q else [64, 96, 128, 192, 256, 384, 512]
    rounds = 6 if q else 15
    g_levels = [1, 4, 16] if q else [1, 2, 4, 8, 16, 32, 64]
    g_seconds = 10.0 if q else 20.0
    n_memory = 10_000 if q else 100_000

    server_cpus, client_cpus, pinning = cpu_split()
    work = args.work or Path(tempfile.mkdtemp(prefix="perfkit-loadgen-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"perfkit bench vs the reference server (perfkit lab serve): {pinning}")
    print(
        f"truth: TTFT {TTFT_MS:g} ms + (K-1)*{ITL_MS:g} ms, ITL {ITL_MS:g} ms per token; prompts {PROMPT_TOKENS}, "
        f"outputs {OUTPUT_TOKENS} tokens. Errors: the warm-up round excluded (p99 all: included)."
    )
    print(
        f"targets: TTFT p50 and p99 within {TTFT_TOL_MS:g} ms, ITL median within {ITL_TOL_MS:g} ms ('targets'); "
        f"the 10 % rule: TTFT p50 within {0.1 * TTFT_MS:g} ms, ITL median within {0.1 * ITL_MS:g} ms ('10 %').\n"
        "columns: client cpu = the client's CPU seconds per wall second; server late = share of the server's "
        f"chunks sent over {SERVER_LATE_MS:g} ms late;\n"
        "wait cpu = share of the run some task on this machine waited for a CPU (/proc/pressure/cpu; "
        f"up to {args.attempts} attempts per level, one that holds is enough)"
    )
    try:
        results = _accuracy_part(args, work, server_cpus, client_cpus, n_accuracy)
        first = results["accuracy_k1_runs"]
        results |= _capacity_part(args, work, server_cpus, client_cpus, levels, rounds, first)
        results |= _guidellm_part(args, work, server_cpus, client_cpus, g_levels, g_seconds)
        results |= _memory_part(work, server_cpus, client_cpus, n_memory)
        results |= _summary_memory_part(work, n_memory)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    _summary(results, n_memory)
    return 0


def _accuracy_part(args, work, server_cpus, client_cpus, n: int) -> dict[str, Any]:
    print(f"\n== 1. accuracy at {ACCURACY_STREAMS} streams ({n} requests per attempt) ==")
    out: dict[str, Any] = {}
    for k in (1, 4):
        truth = TTFT_MS + (k - 1) * ITL_MS
        print(f"\n-- {k} token(s) per chunk: true TTFT {truth:g} ms, true ITL {ITL_MS:g} ms per token")
        print(HEADER)
        runs: list[Run] = []
        timing = work / f"server-ttft-k{k}-{os.getpid()}.tsv"
        timing.unlink(missing_ok=True)
        with serving(
            ttft_ms=TTFT_MS,
            itl_ms=ITL_MS,
            tokens_per_chunk=k,
            model=MODEL,
            cpus=server_cpus,
            timing_log=str(timing),
        ) as url:
            for attempt in range(1, args.attempts + 1):
                run = perfkit_run(
                    url, ACCURACY_STREAMS, n, work, client_cpus, attempt=attempt, k=k, timing_log=timing
                )
                print(run.row(), flush=True)
                runs.append(run)
                if run.holds():
                    break
        best = min(runs, key=Run.badness)
        if math.isfinite(best.to_server_p99):
            print(
                f"   attempt {best.attempt}, p99 on one clock: the server's first write to the client's read "
                f"{best.own_p99:.2f} ms (the client's own error); the client's write of the request to the "
                f"server's read of it {best.to_server_p99:.2f} ms (the server's read queue: not the client's)"
            )
        if rep := best.reported:
            print(
                f"   perfkit bench printed (all requests, attempt {best.attempt}): TTFT p50 {rep['p50_ttft_ms']:.1f} ms, "
                f"p99 {rep['p99_ttft_ms']:.1f} ms; ITL median {rep['median_itl_ms']:.2f} ms per token, "
                f"{rep['median_itl_chunk_ms']:.2f} ms per chunk; {rep['tokens_per_chunk']:.2f} tokens per chunk; "
                f"peak RSS {best.rss_mb:.0f} MB"
            )
        out[f"accuracy_k{k}"], out[f"accuracy_k{k}_runs"] = best, runs
    return out


def _capacity_part(args, work, server_cpus, client_cpus, levels, rounds, first: list[Run]) -> dict[str, Any]:
    print(f"\n== 2. capacity: perfkit bench, concurrency {levels}, {rounds} rounds per level ==")
    print(f"   ({first[0].streams} streams: the accuracy runs above)")
    print(HEADER)
    with serving(ttft_ms=TTFT_MS, itl_ms=ITL_MS, model=MODEL, cpus=server_cpus) as url:
        best = perfkit_ladder(url, levels, rounds, work, client_cpus, args.attempts, first)
    return {"perfkit_best": best}


def _guidellm_part(args, work, server_cpus, client_cpus, g_levels, g_seconds) -> dict[str, Any]:
    print(f"\n== 2b. capacity: guidellm, concurrent streams {g_levels}, {g_seconds:g} s each ==")
    if args.skip_guidellm:
        print("guidellm: skipped (--skip-guidellm)")
        return {"guidellm_skipped": "--skip-guidellm"}
    try:
        exe, tok = install_guidellm(args.cache_dir or cache_dir())
        version = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=120)
        print(
            f"guidellm: {_last_line(version.stdout)}; tokenizer {tok} (tiny BPE: its prompts are shorter in server words)"
        )
        print(HEADER)
        with serving(ttft_ms=TTFT_MS, itl_ms=ITL_MS, model=MODEL, cpus=server_cpus) as url:
            best = guidellm_ladder(exe, tok, url, g_levels, g_seconds, work, client_cpus, args.attempts)
    except (Skipped, OSError, subprocess.SubprocessError) as exc:
        print(f"guidellm: skipped ({' '.join(str(exc).split())[:300]})")
        return {"guidellm_skipped": str(exc)}
    if not best:
        print("guidellm: skipped (it produced no benchmark)")
        return {"guidellm_skipped": "no benchmark in its output"}
    return {"guidellm_best": best}


def _memory_part(work, server_cpus, client_cpus, n: int) -> dict[str, Any]:
    print(f"\n== 3. memory: {n:,} requests, {OUTPUT_TOKENS} output tokens, TTFT and ITL 1 ms, 64 streams ==")
    with serving(ttft_ms=1.0, itl_ms=1.0, model=MODEL, cpus=server_cpus) as url:
        run = perfkit_run(url, 64, n, work, client_cpus, judge=False)
    if run.problem:
        print(f"perfkit bench: {run.problem}")
    else:
        print(
            f"perfkit bench: {run.completed:,} completed, {run.failed} failed, {run.req_s:.0f} req/s, "
            f"{run.wall_s:.0f} s wall, peak RSS {run.rss_mb:.0f} MB"
        )
    return {"memory": run}


def synthetic_records(path: Path, n: int, tokens: int, seed: int = 0) -> None:
    """``n`` completed requests of ``tokens`` one-token chunks ~10 ms apart, as perfkit bench
    writes them (perfkit.loadgen.records)."""
    from perfkit.loadgen.records import Record, RecordSink

    rng = np.random.default_rng(seed)
    sink = RecordSink(path)
    for i in range(n):
        gaps = (ITL_MS / 1e3 + rng.random(tokens - 1) * 1e-3).tolist()
        sink.add(
            Record(
                i=i,
                scheduled_s=i / 100,
                sent_s=i / 100,
                ttft_s=TTFT_MS / 1e3,
                e2el_s=TTFT_MS / 1e3 + sum(gaps),
                prompt_tokens=PROMPT_TOKENS,
                output_tokens=tokens,
                client_tokens=tokens,
                chunks=tokens,
                gaps_s=gaps,
                chunk_tokens=[1] * (tokens - 1),
                status=200,
            )
        )
    sink.close()


def _summary_memory_part(work: Path, n: int) -> dict[str, Any]:
    print(f"\n== 3b. memory of the summary alone: {n:,} requests x {OUTPUT_TOKENS} output tokens ==")
    path = work / f"synthetic-{n}x{OUTPUT_TOKENS}.requests.parquet"
    t = time.perf_counter()
    synthetic_records(path, n, OUTPUT_TOKENS)
    m = measure([sys.executable, "-c", _SUMMARY, str(path)], None, timeout_s=600)
    path.unlink(missing_ok=True)
    if m["rc"] != 0:
        print(f"summary: failed (rc {m['rc']}): {_last_line(m['err'])}")
        return {"summary_memory": None}
    print(
        f"perfkit.loadgen.summary.summarise over records written here ({time.perf_counter() - t:.0f} s in all): "
        f"{m['wall_s']:.1f} s, peak RSS {m['rss_mb']:.0f} MB (perfkit bench runs it last, in its own process)"
    )
    return {"summary_memory": m["rss_mb"]}


def _why(runs: list[Run]) -> str:
    """Who was short at the first level that failed: the client's CPU and the server's lateness
    (the best attempt's), so that a reader can tell a client limit from the server's."""
    r = min(runs, key=Run.badness)
    cpu = "-" if r.client_cpu is None else f"{r.client_cpu:.0%}"
    late = "-" if r.server_late is None else f"{r.server_late:.1%}"
    return (
        f"at {r.streams} streams the client used {cpu} of its CPU and the server sent {late} of its chunks "
        f"over {SERVER_LATE_MS:g} ms late"
    )


def _rate(run: Run | None) -> str:
    if run is None:
        return "none"
    plural = "s" if run.streams != 1 else ""
    return f"{run.streams} stream{plural}, {run.req_s:.1f} req/s ({run.judged} requests judged)"


def _summary(results: dict[str, Any], n_memory: int) -> None:
    print("\n== targets (issue 10), this run ==")
    for k in (1, 4):
        r = results[f"accuracy_k{k}"]
        print(
            f"accuracy, {k} token(s)/chunk, {ACCURACY_STREAMS} streams: the client's own TTFT error p50 "
            f"{r.own_p50:+.2f} ms, p99 {r.own_p99:+.2f} ms (against the configured truth, the server's lateness "
            f"included: p50 {r.ttft_p50:+.2f}, p99 {r.ttft_p99:+.2f}, all requests {r.ttft_p99_all:+.2f}), "
            f"ITL median {r.itl_p50:+.2f} ms -> {verdict(r.holds())}"
        )
    ptried = results["perfkit_best"]
    gtried = results.get("guidellm_best")
    for name, rule in RULES.items():
        p = capacity(ptried, rule)
        line = f"capacity ({name}): perfkit {_rate(p)}"
        above = [lv for lv in sorted(ptried) if lv > (p.streams if p is not None else 0)]
        if p is not None and not above:
            line += " (the top level tried: a lower bound)"
        elif above:
            line += f" ({_why(ptried[above[0]])})"
        if gtried:
            g = capacity(gtried, rule)
            if g is not None:
                line += f"; guidellm {_rate(g)}"
            if p is not None and g is not None:
                ratio = p.req_s / g.req_s
                line += (
                    f"; ratio {ratio:.1f}x -> {verdict(ratio >= CAPACITY_RATIO)} (target {CAPACITY_RATIO:g}x)"
                )
            elif p is None and g is None:
                line += "; neither held at any level tried: no ratio"
            elif p is None:
                line += " -> NOT MET (perfkit held at no level it tried)"
            else:
                low = max(gtried[min(gtried)], key=lambda r: r.req_s if math.isfinite(r.req_s) else 0.0)
                ratio = p.req_s / low.req_s
                line += (
                    f"; guidellm held at no level (at its lowest, {_rate(low)}): "
                    f"ratio over {ratio:.1f}x -> "
                    + (
                        verdict(True)
                        if ratio >= CAPACITY_RATIO
                        else f"undecided (a lower bound under {CAPACITY_RATIO:g}x)"
                    )
                )
        else:
            line += f"; guidellm skipped ({results.get('guidellm_skipped', '?')})"
        print(line)
    m = results["memory"]
    ok = not m.problem and m.rss_mb < RSS_LIMIT_MB
    scaled = "" if n_memory >= 100_000 else f" (--quick: {n_memory:,} requests, not 100,000)"
    print(
        f"memory: peak RSS {m.rss_mb:.0f} MB over {n_memory:,} requests{scaled} -> {verdict(ok)} "
        f"(target < {RSS_LIMIT_MB:g} MB)"
    )
    if (mb := results.get("summary_memory")) is not None:
        print(
            f"memory with {OUTPUT_TOKENS}-token outputs (not the issue's case; the summary alone): {mb:.0f} MB "
            f"over {n_memory:,} requests -> {'under' if mb < RSS_LIMIT_MB else 'OVER'} {RSS_LIMIT_MB:g} MB"
        )


if __name__ == "__main__":
    sys.exit(main())
