"""Reading YAML from outside (incident.yaml, batch files, deploy histories) safely and with bounds.

Use :func:`load_yaml` (a file) or :func:`loads_yaml` (text) wherever perfkit reads YAML someone
else wrote, instead of ``yaml.safe_load``:

* only PyYAML's safe tags are constructed (no Python objects, nothing executed);
* a file over ``max_bytes`` (8 MiB) is refused after a ``stat`` and a read of at most
  ``max_bytes + 1`` bytes; a FIFO, a device (a symlink to ``/dev/zero``), a socket or a folder is
  refused without being read;
* the document is refused while it is being composed, before anything is built, if its
  *expanded* size passes ``max_nodes`` (1,000,000) or it nests deeper than ``max_depth`` (100).
  The expanded size counts an alias as a full copy of what it refers to: the classic "billion
  laughs" document (nine levels of nine aliases) is a few hundred bytes that any code walking the
  result (``json.dumps``, papermill writing parameters, a deep copy) would see as 10^9 strings;
  it is refused after a few dozen nodes, in milliseconds. An alias to a node that contains it (a
  recursive document) is refused too.

Every refusal and every syntax error is a :class:`YamlError` (a
:class:`~perfkit.errors.ConfigError`) whose message names the file and, where known, the line:
``deploys.yaml:3: invalid YAML (expected ',' or ']', but got '<stream end>')``. Its ``path``,
``line`` and ``problem`` attributes let a caller re-raise it as another error (incident.yaml
problems are :class:`~perfkit.errors.BundleError`). A missing file raises
:class:`FileNotFoundError`, so the caller can say what the file was for.

>>> loads_yaml("a: [1, 2]", source="<doc>")
{'a': [1, 2]}
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent
from yaml.resolver import Resolver

from perfkit.errors import ConfigError
from perfkit.sources.safeio import RefusedFile, read_capped, size_text

MAX_YAML_BYTES = 8 * 2**20
"""Largest YAML file read: a batch file or deploy history of tens of thousands of entries is < 8 MiB."""
MAX_NODES = 1_000_000
"""Most nodes a document may hold once every alias is expanded as a copy."""
MAX_DEPTH = 100
"""Deepest nesting accepted (PyYAML composes recursively: far deeper would exhaust the stack)."""


class YamlError(ConfigError):
    """A YAML file or text perfkit refuses: invalid, too large, too deep, or expanding too far."""

    def __init__(self, problem: str, *, path: str, line: int | None = None) -> None:
        self.path = path
        self.line = line
        self.problem = problem
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {problem}")


class _Refused(yaml.YAMLError):
    """Raised inside the loader; turned into :class:`YamlError` with the file name."""

    def __init__(self, problem: str, line: int | None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.line = line


class _CappedComposer:
    """Composer mixin that tracks every node's expanded size and the nesting depth as it composes."""

    max_nodes = MAX_NODES
    max_depth = MAX_DEPTH

    def compose_document(self) -> Any:
        self._sizes: dict[int, int] = {}  # id(node) -> expanded size; absent while being composed
        self._depth = 0
        self._total = 0
        try:
            return Composer.compose_document(self)  # type: ignore[arg-type]
        finally:
            self._sizes = {}

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(AliasEvent):  # type: ignore[attr-defined]
            event = self.peek_event()  # type: ignore[attr-defined]
            target = self.anchors.get(event.anchor)  # type: ignore[attr-defined]
            if target is not None and id(target) not in self._sizes:
                raise _Refused(
                    f"alias *{event.anchor} refers to a node that contains it (recursive document)",
                    _line(event),
                )
            node = Composer.compose_node(self, parent, index)  # type: ignore[arg-type]
            self._count(self._sizes[id(node)], event)
            return node
        event = self.peek_event()  # type: ignore[attr-defined]
        self._count(1, event)
        self._depth += 1
        if self._depth > self.max_depth:
            raise _Refused(f"nested deeper than {self.max_depth} levels", _line(event))
        node = Composer.compose_node(self, parent, index)  # type: ignore[arg-type]
        self._depth -= 1
        size = 1
        if isinstance(node, yaml.SequenceNode):
            size += sum(self._sizes[id(child)] for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            size += sum(self._sizes[id(k)] + self._sizes[id(v)] for k, v in node.value)
        self._sizes[id(node)] = size
        return node

    def _count(self, n: int, event: Any) -> None:
        """Add ``n`` nodes to the document's expanded size (a node: 1; an alias: its target's size).

        The running total ends equal to the root's expanded size, so stopping when it passes the
        cap refuses exactly the documents that are too large, as soon as they are.
        """
        self._total += n
        if self._total > self.max_nodes:
            raise _Refused(
                f"expands to more than {self.max_nodes:,} nodes once its aliases are expanded "
                "(an alias bomb?)",
                _line(event),
            )


def _line(event: Any) -> int | None:
    mark = getattr(event, "start_mark", None)
    return mark.line + 1 if mark is not None else None


_CParser: Any  # the class below, or None without libyaml
try:  # libyaml's parser (C) feeding the capped Python composer: about 4x faster than pure Python
    from yaml._yaml import CParser as _CParser
except ImportError:  # PyYAML built without libyaml
    _CParser = None

_LOADERS: dict[tuple[type, int, int], type] = {}


def _c_init(self: Any, stream: Any) -> None:
    _CParser.__init__(self, stream)
    Composer.__init__(self)
    SafeConstructor.__init__(self)
    Resolver.__init__(self)


def _capped(loader: type[yaml.SafeLoader], max_nodes: int, max_depth: int) -> type:
    """``loader`` with the capped composer (cached per loader and caps).

    Events come from libyaml when PyYAML has it (its parser keeps a state stack, no recursion);
    composition is always the Python :class:`_CappedComposer`, and construction and resolvers
    are ``loader``'s, so a subclass with other implicit resolvers keeps them.
    """
    if not (isinstance(loader, type) and issubclass(loader, yaml.SafeLoader)):
        raise TypeError(f"loader must be yaml.SafeLoader or a subclass of it, got {loader!r}")
    key = (loader, max_nodes, max_depth)
    if key not in _LOADERS:
        attrs: dict[str, Any] = {"max_nodes": max_nodes, "max_depth": max_depth}
        bases: tuple[type, ...] = (_CappedComposer, loader)
        if _CParser is not None:
            bases = (_CappedComposer, _CParser, loader)
            attrs.update(
                __init__=_c_init,
                # CParser composes in C; these three must be the Python composer's
                get_single_node=Composer.get_single_node,
                check_node=Composer.check_node,
                get_node=Composer.get_node,
            )
        _LOADERS[key] = type(f"Capped{loader.__name__}", bases, attrs)
    return _LOADERS[key]


def loads_yaml(
    text: str,
    *,
    source: str = "<text>",
    loader: type[yaml.SafeLoader] = yaml.SafeLoader,
    max_bytes: int = MAX_YAML_BYTES,
    max_nodes: int = MAX_NODES,
    max_depth: int = MAX_DEPTH,
) -> Any:
    """Parse one YAML document from ``text`` safely, within the caps (see the module docstring).

    ``source`` names the text in messages. ``loader`` may be a subclass of
    :class:`yaml.SafeLoader` with other implicit resolvers (its constructor and resolvers are
    used; the parser is libyaml's when available, the composer always the capped Python one).
    Raises :class:`YamlError` (a ConfigError) ``source:line: problem``.
    """
    if len(text) > max_bytes:
        raise YamlError(f"YAML text longer than the {size_text(max_bytes)} limit", path=source)
    cls = _capped(loader, max_nodes, max_depth)
    try:
        return yaml.load(text, Loader=cls)  # noqa: S506 - a SafeLoader subclass
    except _Refused as exc:
        raise YamlError(f"refused: {exc.problem}", path=source, line=exc.line) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "syntax error"
        line = mark.line + 1 if mark is not None else None
        raise YamlError(f"invalid YAML ({problem})", path=source, line=line) from None
    except yaml.reader.ReaderError as exc:  # a control character or bad encoding
        position = getattr(exc, "position", None)
        line = text.count("\n", 0, position) + 1 if isinstance(position, int) else None
        char = exc.character if isinstance(exc.character, int) else ord(str(exc.character)[:1] or "?")
        raise YamlError(f"invalid YAML ({exc.reason}: #x{char:04x})", path=source, line=line) from None
    except yaml.YAMLError as exc:
        raise YamlError(f"invalid YAML ({exc})", path=source) from None
    except RecursionError:  # not reached with the depth cap; kept as a last guard
        raise YamlError("refused: nested too deeply", path=source) from None


def load_yaml(
    path: str | os.PathLike[str],
    *,
    max_bytes: int = MAX_YAML_BYTES,
    loader: type[yaml.SafeLoader] = yaml.SafeLoader,
    max_nodes: int = MAX_NODES,
    max_depth: int = MAX_DEPTH,
) -> Any:
    """Read the YAML file ``path`` safely and within bounds; the drop-in for ``yaml.safe_load``.

    Returns what ``yaml.safe_load`` would (``None`` for an empty file). Refuses, with
    :class:`YamlError` (a :class:`~perfkit.errors.ConfigError`) ``path[:line]: problem``:

    * a file over ``max_bytes`` (8 MiB), without reading more than ``max_bytes + 1`` bytes;
    * a FIFO, device, socket or folder (also through a symlink), without reading it;
    * text that is not UTF-8 (a BOM is allowed), invalid YAML (``path:line: invalid YAML (...)``);
    * a document deeper than ``max_depth`` or larger than ``max_nodes`` once aliases are
      expanded (``path:line: refused: ...``), before any object is built.

    Raises :class:`FileNotFoundError` when ``path`` does not exist (say what was expected),
    :class:`YamlError` for other read errors (permission denied ...).
    """
    name = str(path)
    try:
        data = read_capped(Path(path), max_bytes)
    except FileNotFoundError:
        raise
    except RefusedFile as exc:
        raise YamlError(exc.reason, path=name) from None
    except OSError as exc:
        raise YamlError(f"cannot read ({exc.strerror or type(exc).__name__})", path=name) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise YamlError(f"not UTF-8 text (byte {exc.start})", path=name, line=line) from None
    return loads_yaml(
        text, source=name, loader=loader, max_bytes=max_bytes, max_nodes=max_nodes, max_depth=max_depth
    )
