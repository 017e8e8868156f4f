"""Reading input files: the one way lit-marl reads a result file (the counterpart of :mod:`lit_marl.atomic`).

A file that cannot be used is refused with a :class:`~lit_marl.errors.ConfigError` naming it, what is wrong with it
(missing, a folder, empty, truncated, a checkpoint or other binary data where text belongs, not JSON or YAML, the
wrong shape) and what is allowed; the CLI prints that one line and exits with code 2. A shape check is a function
of the parsed data that returns what is wrong with it (``None``: nothing), e.g. ``"no 'per_episode'"``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from lit_marl.errors import ConfigError

_MERGE = "tag:yaml.org,2002:merge"

#: a shape check: what is wrong with the parsed data, or None
Shape = Callable[[Any], "str | None"]
#: what a cut-off JSON value can end with when the parser stops at it (a literal or number cut short)
_CUT_LITERALS = ("true", "false", "null", "NaN", "Infinity", "-Infinity")
_CUT_NUMBER = re.compile(r"-?[0-9.eE+-]*")


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A key given twice in one mapping of a YAML file: ``key`` (dotted from the top), at ``lines`` (1-based)."""

    def __init__(self, key: str, lines: tuple[int, int], mark: yaml.Mark) -> None:
        super().__init__(None, None, f"the key {key!r} twice (lines {lines[0]} and {lines[1]})", mark)
        self.key, self.lines = key, lines


class StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (:class:`DuplicateKeyError`), at any depth.

    PyYAML keeps the last of them without a word: a grid's second ``mappo:`` line under ``algorithms:`` would train
    another config under the name mappo. Keys merged in with ``<<:`` may still be overridden (that is what merging
    is for)."""

    def construct_document(self, node: yaml.Node) -> Any:
        self._refuse_duplicates(node, "", set())
        return super().construct_document(node)

    def _refuse_duplicates(self, node: yaml.Node, path: str, seen_nodes: set[int]) -> None:
        if id(node) in seen_nodes:  # an alias of a node already checked (or of itself)
            return
        seen_nodes.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self._refuse_duplicates(item, f"{path}[{i}]", seen_nodes)
        elif isinstance(node, yaml.MappingNode):
            first: dict[Any, yaml.Node] = {}
            for key_node, value_node in node.value:
                if key_node.tag == _MERGE:
                    continue
                key = self.construct_object(key_node, deep=True)
                dotted = f"{path}.{key}" if path else str(key)
                try:
                    earlier = first.setdefault(key, key_node)
                except TypeError:  # an unhashable key: PyYAML's own construction refuses it by name
                    earlier = key_node
                if earlier is not key_node:
                    raise DuplicateKeyError(dotted, (earlier.start_mark.line + 1, key_node.start_mark.line + 1),
                                            key_node.start_mark)
                self._refuse_duplicates(value_node, dotted, seen_nodes)


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` of a file a user wrote, refusing a key given twice (:class:`StrictLoader`)."""
    return yaml.load(text, Loader=StrictLoader)  # noqa: S506 (a SafeLoader subclass)


def twice(what: str, path: str | os.PathLike, err: DuplicateKeyError, allowed: str) -> ConfigError:
    """The refusal of a YAML file with a key given twice (:class:`StrictLoader`)."""
    return refused(what, path, f"a YAML file with {err.problem}: YAML keeps only the last, silently",
                   f"each key once, in {allowed}")


def refused(what: str, path: str | os.PathLike, problem: str, allowed: str) -> ConfigError:
    """``<what> '<path>' is <problem>; allowed: <allowed>``, e.g. ``compare: eval_info 'a.json' is empty; …``."""
    return ConfigError(f"{what} {str(path)!r} is {problem}; allowed: {allowed}")


def binary_kind(head: bytes) -> str | None:
    """What a file's first bytes say it is when it is not text (``None``: it may be text)."""
    if head.startswith(b"PK\x03\x04"):
        return "a checkpoint (zip archive, as torch.save writes)"
    if head.startswith(b"\x80"):
        return "a pickle (an old-style checkpoint?)"
    if b"\x00" in head:
        return "binary"
    return None


def looks_like_json(head: bytes) -> bool:
    """Whether a file's first bytes are text that starts a JSON object or list (a checkpoint reader names such
    files)."""
    if head.lstrip()[:1] not in (b"{", b"[") or b"\x00" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as err:
        return err.reason == "unexpected end of data"  # the head may cut a multi-byte character
    return True


def json_kind(value: Any) -> str:
    """``value``'s kind in JSON's words, for shape messages: 'a list', 'an object', 'a string', …."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    kinds = {dict: "an object", list: "a list", str: "a string", int: "a number", float: "a number"}
    return next((name for cls, name in kinds.items() if isinstance(value, cls)), type(value).__name__)


def read_text(path: str | os.PathLike, what: str, allowed: str, format: str = "text") -> str:
    """The text of a file (UTF-8), refused if it is missing, a folder, empty or binary (``format``: what it should
    be, for the message)."""
    path = Path(path)
    if path.is_dir():
        raise refused(what, path, "a folder, not a file", allowed)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise refused(what, path, "missing (no such file)", allowed) from None
    except OSError as err:
        raise refused(what, path, f"unreadable ({err.strerror or err})", allowed) from None
    if not data.strip():
        raise refused(what, path, "empty", allowed)
    kind = binary_kind(data[:4096])
    if kind is not None:
        raise refused(what, path, f"{kind}, not {format}", allowed)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        if err.reason == "unexpected end of data":  # cut inside a multi-byte character: the parser says truncated
            return data[:err.start].decode("utf-8")
        raise refused(what, path, f"binary, not {format} (byte {err.start} is not UTF-8 text)", allowed) from None


def _cut_short(text: str, err: json.JSONDecodeError) -> bool:
    """Whether the JSON parser stopped because the text ends early (a truncated file) rather than at a bad token."""
    rest = text[err.pos:].strip()
    return (not rest or err.msg.startswith("Unterminated string")
            or err.msg.startswith("Invalid \\u") and len(rest) < 6  # json's "Invalid \\u<4 hex> escape"
            or any(literal.startswith(rest) for literal in _CUT_LITERALS) or _CUT_NUMBER.fullmatch(rest) is not None)


def _checked(data: Any, path: Path, what: str, allowed: str, shape: Shape | None) -> Any:
    problem = shape(data) if shape is not None else None
    if problem is not None:
        raise refused(what, path, f"of the wrong shape ({problem})", allowed)
    return data


def read_json(path: str | os.PathLike, what: str, allowed: str, shape: Shape | None = None) -> Any:
    """A JSON file's data, refused by name if it cannot be read (:func:`read_text`), is truncated, is not JSON or
    fails ``shape``."""
    text = read_text(path, what, allowed, "JSON")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        problem = (f"truncated (its JSON stops mid-value at line {text.rstrip().count(chr(10)) + 1})"
                   if _cut_short(text, err) else f"not JSON ({err.msg} at line {err.lineno}, column {err.colno})")
        raise refused(what, path, problem, allowed) from None
    return _checked(data, Path(path), what, allowed, shape)


def read_yaml(path: str | os.PathLike, what: str, allowed: str, shape: Shape | None = None) -> Any:
    """A YAML file's data, refused by name as :func:`read_json` refuses a JSON file, and when a mapping in it has a
    key twice (:class:`StrictLoader`)."""
    text = read_text(path, what, allowed, "YAML")
    try:
        data = load_yaml(text)
    except DuplicateKeyError as err:
        raise twice(what, path, err, allowed) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise refused(what, path, f"not YAML ({getattr(err, 'problem', None) or type(err).__name__}{where})",
                      allowed) from None
    return _checked(data, Path(path), what, allowed, shape)
