"""Which workload an incident is about: a scope of PromQL label matchers, and the host join.

A fleet's Prometheus holds every model and every job. ``--scope '{model_name="meta-llama/Llama-3.1-70B"}'``
(or ``scope:`` in ``incident.yaml``, or the runbooks' ``scope`` parameter) names the affected
workload with the label matchers PromQL uses (``=``, ``!=``, ``=~``, ``!~``; regular expressions are
RE2, fully anchored, as Prometheus reads them).

How a family is narrowed (:func:`family_rule`):

* **Workload families** (vLLM's ``vllm:*``, training ``train_*``, anything not below) that carry a
  label the scope selects on are filtered by the matchers (an absent label reads as ``""``, as in
  PromQL).
* **GPU and host families** (``DCGM_*``, ``node_*``, ``nvidia_*``) never carry the workload's
  labels: they are narrowed to the *hosts* the scoped workload series come from, and so is a
  workload family that lacks the scope's labels (an info metric without ``model_name``).

The host join: a series' hosts are the host part of its ``instance`` label (``gpu-07:9400`` →
``gpu-07``, ``[fe80::1]:8000`` → ``fe80::1``) and the values of its ``Hostname`` (DCGM exporter),
``hostname``, ``node`` or ``kubernetes_node`` labels. A GPU/host series is kept when one of its
hosts is one of the workload's. ``--hosts a,b`` gives the hosts instead (for fleets whose pods
and exporters share no host label). A GPU/host series with no host label at all cannot be joined:
it is kept and counted in :attr:`ScopeReport.unjoined`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import re2  # RE2, as Prometheus: linear time on hostile patterns, the same syntax

from perfkit.errors import ConfigError

MAX_SCOPE_CHARS = 2048
"""Longest scope text: a dozen matchers with long model names are a few hundred characters."""
MAX_MATCHERS = 16
MAX_HOSTS = 4096
HOST_LABELS = ("Hostname", "hostname", "node", "kubernetes_node")
"""Labels that name a host, besides ``instance``: DCGM exporter's ``Hostname``, node exporter
relabelled ``hostname``/``node``, and Kubernetes service discovery's ``kubernetes_node``."""
INFRASTRUCTURE_PREFIXES = ("DCGM_", "node_", "nvidia_")
"""Families of GPU and host exporters: they describe a machine, not a workload."""
OPS = ("=~", "!~", "!=", "=")

_LABEL = r"[a-zA-Z_][a-zA-Z0-9_]*"
_MATCHER = re.compile(rf'\s*({_LABEL})\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
_HOSTNAME = re.compile(r"^[A-Za-z0-9_.:%\[\]-]{1,253}$")


@dataclass(frozen=True)
class Matcher:
    label: str
    op: str  # one of OPS
    value: str

    def __post_init__(self) -> None:
        if self.op in ("=~", "!~"):
            try:
                re2.compile(self.value)
            except re2.error as exc:
                raise ConfigError(
                    f'scope: {self.label}{self.op}"{self.value}": not a valid regular expression ({exc})'
                ) from None

    def matches(self, labels: Mapping[str, Any]) -> bool:
        value = labels.get(self.label)
        text = "" if value is None else str(value)
        if self.op == "=":
            return text == self.value
        if self.op == "!=":
            return text != self.value
        hit = _regex(self.value).fullmatch(text) is not None
        return hit if self.op == "=~" else not hit

    @property
    def selects(self) -> bool:
        """Whether this matcher picks series by a label they carry (it does not match an absent label)."""
        return not self.matches({})

    def promql(self) -> str:
        return f'{self.label}{self.op}"{escape(self.value)}"'


_REGEX_CACHE: dict[str, Any] = {}


def _regex(pattern: str) -> Any:
    compiled = _REGEX_CACHE.get(pattern)
    if compiled is None:
        compiled = _REGEX_CACHE[pattern] = re2.compile(pattern)
    return compiled


def escape(value: str) -> str:
    """A label value as PromQL's double-quoted string literal body."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), value)


@dataclass(frozen=True)
class Scope:
    """The affected workload's matchers, and optionally the hosts to keep (``--hosts``)."""

    matchers: tuple[Matcher, ...] = ()
    hosts: frozenset[str] | None = None

    def __bool__(self) -> bool:
        return bool(self.matchers) or self.hosts is not None

    @property
    def labels(self) -> frozenset[str]:
        """The labels the scope selects workload series by."""
        return frozenset(m.label for m in self.matchers if m.selects)

    def matches(self, labels: Mapping[str, Any]) -> bool:
        return all(m.matches(labels) for m in self.matchers)

    def promql(self) -> str:
        """The matchers as PromQL's ``{...}`` (empty string without matchers)."""
        return "{" + ",".join(m.promql() for m in self.matchers) + "}" if self.matchers else ""

    def describe(self) -> str:
        parts = [self.promql()] if self.matchers else []
        if self.hosts is not None:
            parts.append("hosts " + ", ".join(sorted(self.hosts)))
        return "; ".join(parts) or "everything"

    def as_dict(self) -> dict[str, Any]:
        return {"matchers": self.promql(), "hosts": sorted(self.hosts) if self.hosts is not None else None}


def parse_scope(text: str | None, hosts: str | Iterable[str] | None = None) -> Scope:
    """``'{model_name="x",pod=~"vllm-.*"}'`` (braces optional) and ``'a,b'`` hosts → a :class:`Scope`.

    Raises :class:`~perfkit.errors.ConfigError` naming the part it cannot read.
    """
    text = (text or "").strip()
    if len(text) > MAX_SCOPE_CHARS:
        raise ConfigError(f"scope: longer than {MAX_SCOPE_CHARS} characters")
    if text.startswith("{"):
        if not text.endswith("}"):
            raise ConfigError(f"scope: {text!r} opens a brace it does not close")
        text = text[1:-1]
    matchers: list[Matcher] = []
    pos = 0
    body = text.strip()
    while pos < len(body):
        m = _MATCHER.match(body, pos)
        if m is None:
            raise ConfigError(
                f'scope: cannot read {body[pos : pos + 40]!r}: expected label="value" '
                '(or !=, =~, !~), e.g. {model_name="meta-llama/Llama-3.1-70B-Instruct"}'
            )
        matchers.append(Matcher(m.group(1), m.group(2), _unescape(m.group(3))))
        pos = m.end()
        if m.group(4) == "" and pos < len(body):
            raise ConfigError(f"scope: expected a comma before {body[pos : pos + 40]!r}")
    if len(matchers) > MAX_MATCHERS:
        raise ConfigError(f"scope: more than {MAX_MATCHERS} matchers")
    if matchers and not any(m.selects for m in matchers):
        raise ConfigError(
            f"scope: {text!r} selects nothing by itself (every matcher also matches a series without "
            'the label); name the workload with = or =~, e.g. {job="llm-pretrain"}'
        )
    return Scope(tuple(matchers), parse_hosts(hosts))


def parse_hosts(hosts: str | Iterable[str] | None) -> frozenset[str] | None:
    if hosts is None or hosts == "":
        return None
    items = [h.strip() for h in (hosts.split(",") if isinstance(hosts, str) else hosts)]
    items = [h for h in items if h]
    if not items:
        return None
    if len(items) > MAX_HOSTS:
        raise ConfigError(f"hosts: more than {MAX_HOSTS}")
    bad = [h for h in items if not _HOSTNAME.match(h)]
    if bad:
        raise ConfigError(f"hosts: {bad[0][:80]!r} is not a host name or address")
    return frozenset(host_of_instance(h) for h in items)


def host_of_instance(instance: str) -> str:
    """The host part of an ``instance`` label: ``a:9100`` → ``a``, ``[::1]:8000`` → ``::1``."""
    if instance.startswith("["):
        end = instance.find("]")
        return instance[1:end] if end > 0 else instance
    if instance.count(":") == 1:
        host, _, port = instance.partition(":")
        if port.isdigit():
            return host
    return instance


def host_keys(labels: Mapping[str, Any]) -> frozenset[str]:
    """Every host a series names (see the module docstring's host join)."""
    keys = set()
    instance = labels.get("instance")
    if instance:
        keys.add(host_of_instance(str(instance)))
    for name in HOST_LABELS:
        value = labels.get(name)
        if value:
            keys.add(str(value))
    return frozenset(keys)


def is_infrastructure(family: str) -> bool:
    """A GPU or host exporter's family (narrowed by host, never by the workload's labels)."""
    return family.startswith(INFRASTRUCTURE_PREFIXES)


def family_rule(family: str, labels: Iterable[str], scope: Scope) -> str:
    """How ``family`` (with these label names) is narrowed: ``"match"`` (by the matchers) or
    ``"host"`` (by the host join)."""
    if is_infrastructure(family) or not scope.matchers:
        return "host"
    return "match" if scope.labels & set(labels) else "host"


@dataclass
class ScopeReport:
    """What scoping kept: the hosts of the workload, and series counts (kept / all) per rule."""

    scope: Scope
    hosts: list[str] = field(default_factory=list)
    matched: tuple[int, int] = (0, 0)  # workload series kept / seen
    joined: tuple[int, int] = (0, 0)  # GPU/host series kept / seen
    unjoined: int = 0  # GPU/host series without any host label (kept)
    families_dropped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "scope": self.scope.as_dict(),
            "hosts": self.hosts,
            "workload_series": {"kept": self.matched[0], "seen": self.matched[1]},
            "gpu_host_series": {"kept": self.joined[0], "seen": self.joined[1]},
            "unjoined_series": self.unjoined,
            "families_dropped": self.families_dropped,
            "notes": self.notes,
        }
