"""The YAML half of :mod:`accel.config.yamlio`: the strict loader and the bounded walk.

Apart so that a command (or a worker's ``import accel``) in a project without a config
file never imports yaml: 16-25 ms of a start-up, a third of it PyYAML compiling its
reader's patterns. yamlio imports this module the first time it parses a document.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

import yaml

from accel.errors import ConfigError

MAX_NODES = 10_000
MAX_DEPTH = 32  # a config is section: key: value; launch.env is the deepest at 3
MAX_DIGITS = 100
_PLAIN = {"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"}
_BREAK = re.compile(r"\r\n|[\n\r\x85\u2028\u2029]")  # the line breaks YAML counts lines by


def parse(text: str, source: str) -> tuple[Any, dict[str, int]]:
    """The document in ``text`` and the line of each dotted key; ConfigError if invalid."""
    found = unprintable(text)
    if found is not None:  # else PyYAML's reader raises it, with no line, as it is made
        raise ConfigError(f"{source}:{found[0]}: invalid YAML: {found[1]}")
    loader = _StrictLoader(text)
    try:
        _check_depth(text, source)
        node = loader.get_single_node()
        if node is None:
            return {}, {}
        walker = _Walker(loader, source)
        return walker.convert(node, ""), walker.lines
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}" if mark else source
        problem = exc.problem or exc.context
        if problem and "'\\t'" in problem:  # an editor's tab: YAML indents with spaces only
            problem += "; indent with spaces (YAML allows no tabs there)"
        raise ConfigError(f"{where}: invalid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: invalid YAML: {exc}") from None
    finally:
        loader.dispose()


def unprintable(text: str) -> tuple[int, str] | None:
    """(its line, what is wrong and the fix) for the first character of ``text`` that YAML
    refuses (a control character: NUL, ESC, DEL...; by PyYAML's own rule), else None.
    The text itself is not quoted: it may be a secret's value."""
    found = yaml.reader.Reader.NON_PRINTABLE.search(text)
    if found is None:
        return None
    breaks = list(_BREAK.finditer(text, 0, found.start()))
    column = found.start() - (breaks[-1].end() if breaks else 0) + 1
    kind = "control character" if unicodedata.category(found.group()) == "Cc" else "character"
    said = f"{kind} U+{ord(found.group()):04X} at column {column}, which YAML does not allow"
    return len(breaks) + 1, f"{said}; remove it"


class _StrictLoader(yaml.SafeLoader):
    pass


_StrictLoader.yaml_implicit_resolvers = {
    ch: [(tag, rx) for tag, rx in resolvers if tag not in _REPLACED]
    for ch, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    for _REPLACED in [
        {
            "tag:yaml.org,2002:bool",
            "tag:yaml.org,2002:int",
            "tag:yaml.org,2002:float",
            # YAML 1.2 has no implicit dates: `run_name: 2024-01-01` is a name, not a date
            "tag:yaml.org,2002:timestamp",
        }
    ]
}
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"),
    list("-+0123456789"),
)
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?)$"),
    list("-+.0123456789"),
)


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    text = str(loader.construct_scalar(node))
    if len(text) > MAX_DIGITS:
        raise yaml.constructor.ConstructorError(
            None, None, f"a number of {len(text)} digits (at most {MAX_DIGITS})", node.start_mark
        )
    return int(text, 0) if text[:2] in ("0x", "0o") else int(text, 10)


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def _check_depth(text: str, source: str) -> None:
    """Refuse deep nesting from the parser's events (flat, no recursion), before the
    composer, which recurses once per level, builds anything."""
    depth = 0
    for event in yaml.parse(text, Loader=_StrictLoader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                line = event.start_mark.line + 1 if event.start_mark else "?"
                raise ConfigError(
                    f"{source}:{line}: nested more than {MAX_DEPTH} levels deep; a config "
                    "file holds sections of keys (launch: num_processes: 2)"
                )
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


class _Walker:
    def __init__(self, loader: _StrictLoader, source: str) -> None:
        self.loader = loader
        self.source = source
        self.lines: dict[str, int] = {}
        self.visited = 0
        self.open: list[yaml.Node] = []  # the collections being converted, outermost first

    def convert(self, node: yaml.Node, prefix: str) -> Any:
        self.visited += 1
        line = node.start_mark.line + 1
        if self.visited > MAX_NODES:
            raise ConfigError(
                f"{self.source}:{line}: document too large or aliases "
                f"expand too far (more than {MAX_NODES} nodes)"
            )
        if not isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
            return self.loader.construct_object(node, deep=True)
        if any(node is outer for outer in self.open):
            raise ConfigError(
                f"{self.source}:{line}: an alias refers to its own anchor, so its value "
                "never ends; write the value out instead"
            )
        if len(self.open) >= MAX_DEPTH:  # the parser's check cannot see aliases nest
            raise ConfigError(
                f"{self.source}:{line}: nested more than {MAX_DEPTH} levels deep once its "
                "aliases are expanded; a config file holds sections of keys"
            )
        self.open.append(node)
        try:
            return self._collection(node, prefix)
        finally:
            self.open.pop()

    def _collection(self, node: yaml.MappingNode | yaml.SequenceNode, prefix: str) -> Any:
        if node.tag not in _PLAIN:
            raise ConfigError(
                f"{self.source}:{node.start_mark.line + 1}: unsupported YAML tag {node.tag!r}; "
                "remove it (config files hold plain values only)"
            )
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, prefix)
        return [self.convert(child, prefix) for child in node.value]

    def _mapping(self, node: yaml.MappingNode, prefix: str) -> dict[Any, Any]:
        self.loader.flatten_mapping(node)
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode):
                raise ConfigError(f"{self.source}:{line}: keys must be plain strings")
            key = self.loader.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)) or key is None:
                raise ConfigError(f"{self.source}:{line}: keys must be plain strings")
            if key in out:
                dotted = f"{prefix}{key}"
                raise ConfigError(
                    f"{self.source}:{line}: duplicate key {dotted!r} "
                    f"(first at line {self.lines.get(dotted, '?')}); keep only one"
                )
            dotted = f"{prefix}{key}"
            self.lines[dotted] = line
            out[key] = self.convert(value_node, dotted + ".")
        return out
