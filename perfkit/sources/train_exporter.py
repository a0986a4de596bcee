"""Export a training loop's step metrics to Prometheus (perfkit's ``train_*`` contract).

Training jobs have no standard exporter, so perfkit fixes a small set of names (docs/bundle.md) and
this helper sets them with ``prometheus_client``. Every series carries the label ``job`` and,
when given, ``rank``:

==================================  =======  ====================================================
series                              type     meaning
==================================  =======  ====================================================
``train_step_duration_seconds``     gauge    wall time of the last optimizer step
``train_data_wait_seconds``         gauge    time the last step waited for its batch (DataLoader)
``train_comm_seconds``              gauge    collective time of the last step *not* hidden by
                                             compute (optional: only once ``comm_s`` is passed)
``train_tokens_total``              counter  tokens trained on by this process (this rank)
``train_samples_total``             counter  samples (sequences, images ...) trained on
``train_loss``                      gauge    loss of the last step
==================================  =======  ====================================================

Gauges hold the *last* step's values (Prometheus samples them every scrape interval); counters
are cumulative and restart from zero with the process, which ``rate()`` handles. Nothing is
exposed before the first :meth:`TrainMetrics.step`, so a job that is still loading its checkpoint
shows no step time rather than a misleading zero.

Usage in a training loop (one exporter per rank, each on its own port)::

    metrics = TrainMetrics("llama3-8b-pretrain", rank=dist.get_rank())
    metrics.serve(9464 + local_rank)                            # Prometheus scrapes :9464-9471
    t0 = time.perf_counter()
    for batch in loader:                                        # next(loader) blocking = data wait
        t1 = time.perf_counter(); loss = train_step(batch).item()   # .item() waits for the GPU
        metrics.step(time.perf_counter() - t0, t1 - t0, batch.numel(), batch.size(0), loss); t0 = time.perf_counter()

Counter naming: ``prometheus_client`` strips a trailing ``_total`` from a counter's name and adds
it back to the sample, so the counters are created as ``train_tokens``/``train_samples`` and
expose ``train_tokens_total``/``train_samples_total`` (plus ``*_created``, which perfkit's parser
drops). The simulator (:mod:`perfkit.lab.sim.training_exporters`) writes the same names, types and help texts,
taken from :data:`METRICS` (importing this module does not need prometheus_client; using
:class:`TrainMetrics` does).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from perfkit.errors import ConfigError

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

#: family name -> (type, help); counters are named without ``_total`` as prometheus_client wants
METRICS: dict[str, tuple[str, str]] = {
    "train_step_duration_seconds": ("gauge", "Wall time of the last training step in seconds."),
    "train_data_wait_seconds": ("gauge", "Time the last training step waited for its batch in seconds."),
    "train_comm_seconds": (
        "gauge",
        "Collective communication time of the last step not hidden by compute in seconds.",
    ),
    "train_tokens": ("counter", "Tokens trained on by this process."),
    "train_samples": ("counter", "Samples trained on by this process."),
    "train_loss": ("gauge", "Training loss of the last step."),
}


def _check(name: str, value: float) -> float:
    value = float(value)
    if math.isnan(value) or value < 0:
        raise ConfigError(f"{name} must be a non-negative number, got {value!r}")
    return value


class TrainMetrics:
    """The ``train_*`` series of one training process (one rank, or the whole job when ``rank`` is None).

    ``registry`` defaults to prometheus_client's global registry (so the ``process_*`` metrics come
    along on the same port); pass a :class:`~prometheus_client.CollectorRegistry` to keep several
    jobs apart in one process, or in tests.
    """

    def __init__(self, job: str, rank: int | str | None = None, registry: CollectorRegistry | None = None):
        try:
            from prometheus_client import REGISTRY, Counter, Gauge
        except ImportError as exc:  # pragma: no cover - a dev/extra dependency of perfkit
            raise ImportError("TrainMetrics needs prometheus_client (pip install prometheus_client)") from exc
        if not job:
            raise ConfigError("job must be a non-empty string")
        self.job = str(job)
        self.rank = None if rank is None else str(rank)
        self.registry = REGISTRY if registry is None else registry
        names = ("job",) if self.rank is None else ("job", "rank")
        self._values = (self.job,) if self.rank is None else (self.job, self.rank)
        self._families: dict[str, Any] = {}
        for name, (kind, help_) in METRICS.items():
            cls = Gauge if kind == "gauge" else Counter
            self._families[name] = cls(name, help_, names, registry=self.registry)
        self.steps = 0

    def _child(self, name: str):
        return self._families[name].labels(*self._values)

    def step(
        self,
        duration_s: float,
        data_wait_s: float,
        tokens: float,
        samples: float,
        loss: float,
        comm_s: float | None = None,
    ) -> None:
        """Record one finished optimizer step: its wall time, its batch wait, what it consumed, its loss.

        ``comm_s`` is the collective time the step spent *exposed* (not overlapped with compute);
        leave it None when the loop cannot measure it and ``train_comm_seconds`` stays absent.
        """
        duration_s = _check("duration_s", duration_s)
        data_wait_s = _check("data_wait_s", data_wait_s)
        tokens = _check("tokens", tokens)
        samples = _check("samples", samples)
        loss = float(loss)  # NaN/inf loss is worth exporting: it is the incident
        if comm_s is not None:
            comm_s = _check("comm_s", comm_s)
        self._child("train_step_duration_seconds").set(duration_s)
        self._child("train_data_wait_seconds").set(data_wait_s)
        if comm_s is not None:
            self._child("train_comm_seconds").set(comm_s)
        self._child("train_tokens").inc(tokens)
        self._child("train_samples").inc(samples)
        self._child("train_loss").set(loss)
        self.steps += 1

    def serve(self, port: int, addr: str = "127.0.0.1") -> Any:
        """Serve ``/metrics`` for this registry on ``addr:port`` from a daemon thread.

        Binds to loopback by default; pass ``addr="0.0.0.0"`` for Prometheus on another host.
        Returns what :func:`prometheus_client.start_http_server` returns (server and thread).
        """
        from prometheus_client import start_http_server

        return start_http_server(port, addr=addr, registry=self.registry)
