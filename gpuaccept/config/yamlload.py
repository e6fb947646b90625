"""The one YAML loader of gpuaccept: inventories, group_vars/host_vars files and threshold files.

Built on PyYAML's ``SafeLoader`` (no Python objects, no code), with what operators' files need:

* every mapping is a :class:`YamlMap` (a ``dict``) that remembers the line of each key, so errors name
  ``file:line``;
* a key written twice in one mapping is refused (YAML keeps the last one silently; Ansible warns); keys
  brought in by a ``<<`` merge may be overridden, as YAML means them to be;
* dates stay text (``2024-03-01``), as ``ansible-inventory`` prints them;
* ``.inf``, ``-.inf`` and ``.nan`` (or a float too large for a double) are refused: a bound of infinity
  would switch a check off without a word;
* nesting deeper than :data:`MAX_DEPTH` levels is refused before Python's recursion limit is met;
* anchors and aliases work, but a document whose aliases expand it to more than :data:`MAX_NODES` nodes
  is refused ("billion laughs"); the expansion is counted on the node graph, in time linear in the file;
* a recursive alias (a node that contains itself) is refused;
* a file larger than :data:`MAX_BYTES` or with a longer line than ``MAX_LINE``, a pipe that does not end
  in time (:mod:`gpuaccept.config.bounded`), a file that is not UTF-8, and control characters are refused,
  naming the line; a value echoed in a refusal is shown by :func:`gpuaccept.config.shown.shown` (cut, escaped);
* ``!unsafe`` values are read as plain text (Ansible's tag against templating); ``!vault`` values and
  vault-encrypted files are refused (gpuaccept does not decrypt).

Every error is raised as the caller's :class:`~gpuaccept.errors.ConfigError` subclass with a one-line
message ``<file>:<line>: <reason>``.
"""
from __future__ import annotations

import math
from typing import Any

import yaml

from gpuaccept.errors import ConfigError
from gpuaccept.config.bounded import MAX_BYTES, read_bounded
from gpuaccept.config.shown import shown, shown_path

__all__ = ["MAX_BYTES", "MAX_DEPTH", "MAX_NODES", "YamlMap", "decode", "load", "load_file", "plain",
           "read_text"]

#: deepest nesting of mappings and sequences accepted (real files use fewer than 10 levels)
MAX_DEPTH = 64
#: most nodes a document may have once its aliases are expanded (a 100,000-host YAML inventory with a
#: few vars per host stays under it; the 9-level "billion laughs" document has 387 million)
MAX_NODES = 2_000_000


class YamlMap(dict):
    """A loaded YAML mapping: a ``dict`` with ``line`` (its own first line, 1-based) and ``lines``
    (key -> line of the key, 1-based)."""

    __slots__ = ("line", "lines")

    def __init__(self) -> None:
        super().__init__()
        self.line = 0
        self.lines: dict[Any, int] = {}


class _LoadError(Exception):
    """Raised inside the loader with a line; turned into the caller's error class by :func:`load`."""

    def __init__(self, line: int | None, msg: str):
        super().__init__(msg)
        self.line = line
        self.msg = msg


def _line(node_or_mark: Any) -> int:
    mark = getattr(node_or_mark, "start_mark", node_or_mark)
    return mark.line + 1 if mark is not None else 0


class _Loader(yaml.SafeLoader):
    """SafeLoader with line numbers, duplicate-key refusal, a depth limit and finite floats only."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):  # noqa: ANN001 - PyYAML's signature
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _LoadError(_line(self.peek_event()), f"nested deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


# dates stay text, as ansible-inventory prints them
_Loader.yaml_implicit_resolvers = {  # (_CLoader below shares them)
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:timestamp"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _construct_map(loader: _Loader, node: yaml.MappingNode) -> YamlMap:
    seen: dict[Any, int] = {}
    for knode, _ in node.value:
        if knode.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(knode, deep=True)
        try:
            hash(key)
        except TypeError:
            raise _LoadError(_line(knode), "a mapping key must be a plain value, not a list or mapping") from None
        if key in seen:
            raise _LoadError(_line(knode), f"key {shown(key)} written twice in one mapping (first on line {seen[key]})")
        seen[key] = _line(knode)
    try:
        loader.flatten_mapping(node)
    except yaml.constructor.ConstructorError as err:
        raise _LoadError(_line(err.problem_mark), _one_line(err.problem)) from None
    m = YamlMap()
    m.line = _line(node)
    for knode, vnode in node.value:
        key = loader.construct_object(knode, deep=True)
        m[key] = loader.construct_object(vnode, deep=True)
        m.lines[key] = _line(knode)
    return m


def _construct_float(loader: _Loader, node: yaml.ScalarNode) -> float:
    value = yaml.SafeLoader.construct_yaml_float(loader, node)
    if not math.isfinite(value):
        raise _LoadError(_line(node), f"{shown(node.value)} is not a finite number (infinity and NaN are refused: "
                                      "a bound of .inf or .nan would switch its check off)")
    return value


def _construct_int(loader: _Loader, node: yaml.ScalarNode) -> int:
    try:
        return yaml.SafeLoader.construct_yaml_int(loader, node)
    except ValueError:
        raise _LoadError(_line(node), f"integer {shown(str(node.value), 20)} has too many digits") from None


def _construct_unsafe(loader: _Loader, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return _construct_map(loader, node)


def _construct_vault(loader: _Loader, node: yaml.Node) -> Any:
    raise _LoadError(_line(node), "!vault values are not supported; gpuaccept does not decrypt")


try:  # libyaml's scanner, parser and composer, where PyYAML was built with it
    from yaml.cyaml import CParser as _CParser
except ImportError:  # pragma: no cover - a PyYAML without libyaml: the pure-Python loader alone
    _CParser = None


class _CLoader(*((_CParser,) if _CParser else ()), yaml.constructor.SafeConstructor, yaml.resolver.Resolver):  # noqa
    """The same loader with libyaml parsing (about 10x less CPU: 14 threshold files 0.29 s -> 0.03 s). It
    composes recursively in C, so :func:`load` first walks the events (iterative) to refuse too deep a
    nesting; any error at all is raised again by the pure-Python :class:`_Loader`, so messages are its own."""

    def __init__(self, stream: str):
        _CParser.__init__(self, stream)
        yaml.constructor.SafeConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)


for _cls in (_Loader, _CLoader):
    _cls.yaml_implicit_resolvers = _Loader.yaml_implicit_resolvers
    _cls.add_constructor("tag:yaml.org,2002:map", _construct_map)
    _cls.add_constructor("tag:yaml.org,2002:float", _construct_float)
    _cls.add_constructor("tag:yaml.org,2002:int", _construct_int)
    _cls.add_constructor("!unsafe", _construct_unsafe)
    _cls.add_constructor("!vault", _construct_vault)


def _fast(text: str) -> tuple[bool, Any]:
    """``(True, document)`` when libyaml loads ``text`` without any error and within :data:`MAX_DEPTH`;
    ``(False, None)`` otherwise (no libyaml, an error of any kind, too deep): :func:`load` then parses with
    the pure-Python loader, whose checks and messages are the reference."""
    if _CParser is None:
        return False, None
    loader = None
    try:
        depth = 0
        for ev in yaml.parse(text, Loader=_CLoader):  # events: libyaml's parser is a loop, not a recursion
            if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    return False, None
            elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
        loader = _CLoader(text)
        node = loader.get_single_node()
        if node is None:
            return True, None
        _check_size(node)
        return True, loader.construct_document(node)
    except Exception:  # noqa: BLE001 - every error is the pure-Python loader's to word
        return False, None
    finally:
        if loader is not None:
            loader.dispose()


def _check_size(root: yaml.Node) -> None:
    """Refuse a node graph that contains itself, or whose aliases expand it past MAX_NODES. Iterative,
    each distinct node visited once."""
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        nid = id(node)
        if isinstance(node, yaml.ScalarNode):
            size[nid] = 1
            continue
        children = [c for kv in node.value for c in kv] if isinstance(node, yaml.MappingNode) else node.value
        if done:
            on_path.discard(nid)
            total = 1 + sum(size[id(c)] for c in children)
            if total > MAX_NODES:
                raise _LoadError(_line(root), f"aliases expand this document past {MAX_NODES:,} nodes "
                                              "(an alias bomb?); write the values out or use fewer aliases")
            size[nid] = total
            continue
        if nid in size:
            continue
        if nid in on_path:
            raise _LoadError(_line(node), "an alias refers to the mapping or list that contains it")
        on_path.add(nid)
        stack.append((node, True))
        for c in children:
            cid = id(c)
            if cid in on_path:
                raise _LoadError(_line(c), "an alias refers to the mapping or list that contains it")
            if cid not in size:
                stack.append((c, False))


#: most characters of a YAML library message kept in a refusal (it may quote the file's text)
ONE_LINE_CHARS = 300


def _one_line(s: Any) -> str:
    """A library's message as one line, escaped and cut (it may quote the operator's file)."""
    return shown_path(" ".join(str(s)[: ONE_LINE_CHARS * 4].split()), ONE_LINE_CHARS)


def decode(path: str, data: bytes, error: type[ConfigError]) -> str:
    """``data`` as UTF-8 text (a leading BOM dropped); ``error`` naming the line of the first bad byte."""
    path = shown_path(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise error(f"{path}:{line}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    return text[1:] if text.startswith("\ufeff") else text


def read_text(path: str, error: type[ConfigError], what: str = "file", **bounds: int | float) -> str:
    """Read ``path`` as UTF-8 text within the bounds of :func:`gpuaccept.config.bounded.read_bounded`
    (:data:`MAX_BYTES`, a line of at most ``MAX_LINE`` bytes, ``READ_TIMEOUT_S`` for a pipe or device;
    ``bounds``: ``max_bytes``, ``max_line``, ``timeout_s`` to state others). Raises ``error`` with one line:
    missing, a folder, unreadable, past a bound (naming it), not UTF-8 (with the line). ``what`` names the
    kind of file in messages."""
    return decode(path, read_bounded(path, what, error, **bounds), error)


def load(path: str, text: str, error: type[ConfigError]) -> Any:
    """Parse one YAML document. Mappings are :class:`YamlMap`; None for an empty document.

    Raises ``error`` (a ConfigError subclass) with ``<path>:<line>: <reason>`` on a syntax error, a
    duplicate key, a non-finite float, too deep a nesting, an alias bomb, control characters, ``!vault``
    or a vault-encrypted file.
    """
    path = shown_path(path)
    if text.startswith("$ANSIBLE_VAULT"):
        raise error(f"{path}:1: vault-encrypted file; gpuaccept does not decrypt")
    ok, doc = _fast(text)
    if ok:
        return doc
    loader = None
    try:
        loader = _Loader(text)
        loader.name = path
        node = loader.get_single_node()
        if node is None:
            return None
        _check_size(node)
        return loader.construct_document(node)
    except _LoadError as err:
        raise error(f"{path}:{err.line}: {err.msg}" if err.line else f"{path}: {err.msg}") from None
    except yaml.reader.ReaderError as err:
        line = text[: err.position].count("\n") + 1
        what = f"control character U+{err.character:04X}" if isinstance(err.character, int) else \
            f"character {shown(err.character)}"
        raise error(f"{path}:{line}: YAML error: {what} is not allowed in YAML text") from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{path}:{mark.line + 1}" if mark else path
        raise error(f"{where}: YAML error: {_one_line(err.problem or err.context or err)}") from None
    except yaml.YAMLError as err:
        raise error(f"{path}: YAML error: {_one_line(err)}") from None
    except RecursionError:  # a depth the composer's limit did not see (should not happen)
        raise error(f"{path}: YAML error: nested too deeply") from None
    except (ValueError, TypeError, AttributeError, OverflowError) as err:  # a tagged value PyYAML cannot build
        raise error(f"{path}: YAML error: a value cannot be read ({type(err).__name__}: {_one_line(err)})") from None
    finally:
        if loader is not None:
            loader.dispose()


def load_file(path: str, error: type[ConfigError], what: str = "file", **bounds: int | float) -> Any:
    """:func:`read_text` (within ``bounds``) then :func:`load`."""
    return load(path, read_text(path, error, what, **bounds), error)


def plain(value: Any, _memo: dict | None = None) -> Any:
    """A copy of a loaded value with plain ``dict`` in place of :class:`YamlMap`. A value reached twice
    through aliases is copied once and shared, so the copy costs what the file holds."""
    if not isinstance(value, (dict, list)):
        return value
    memo = {} if _memo is None else _memo
    vid = id(value)
    if vid in memo:
        return memo[vid]
    if isinstance(value, dict):
        out: Any = {}
        memo[vid] = out
        for k, v in value.items():
            out[k] = plain(v, memo)
    else:
        out = []
        memo[vid] = out
        out.extend(plain(v, memo) for v in value)
    return out


def load_data(f) -> Any:
    """A data file shipped with gpuaccept (``f``: text or an open file; trusted, checked by its reader):
    parsed by libyaml's safe loader where PyYAML has it (0.02 s for actions.yaml, against 0.2 s for the pure
    Python one, at every run's start), else by PyYAML's own safe loader. Plain types, no line numbers."""
    return yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader
