"""What ``lit-marl`` prints when the command line or a config file cannot be parsed: one line that leads with the field.

jsonargparse reports a bad value inside the model as a tree ("Does not validate against any of the Union subtypes",
one branch per subtype) under a usage block of some 70 lines. :class:`LitMarlArgumentParser` prints instead, first::

    lit-marl: error: model.init_args.lr: 'abc' is not a number (expected float)
    lit-marl: error: model.init_args.lrr: unknown key; did you mean 'lr'?
    lit-marl: error: configs/x.yaml line 7: a tab character indents this line; YAML allows spaces only

then jsonargparse's own report, indented, for reference, and where ``--help`` lists every option (the usage block is
left to ``--help``). The exit code stays 2. ``JSONARGPARSE_DEBUG=1`` still raises instead, as jsonargparse documents.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import re
import sys
import textwrap
from contextvars import ContextVar
from typing import Any, NoReturn

import yaml
from jsonargparse import ArgumentParser
from lightning.pytorch.cli import LightningArgumentParser
from typing_extensions import override

from lit_marl.errors import did_you_mean

#: the config file a parser is reading (a YAML error inside it names no file)
_READING: ContextVar[str | None] = ContextVar("lit_marl_config_being_read", default=None)


class LitMarlArgumentParser(LightningArgumentParser):
    """LightningCLI's parser whose errors lead with lit-marl's one-line message (see the module docstring)."""

    @override
    def parse_path(self, path: Any, *args: Any, **kwargs: Any) -> Any:
        token = _READING.set(str(path))
        try:
            return super().parse_path(path, *args, **kwargs)
        except Exception as err:  # an error that leaves this parser (not exiting here) keeps the file's name
            _mark_file(err, str(path))
            raise
        finally:
            _READING.reset(token)

    @override
    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        # parsers jsonargparse nests (exit_on_error=False) report to their caller, which tries other subtypes
        if not self.exit_on_error or os.environ.get("JSONARGPARSE_DEBUG", "").lower() in ("1", "true", "yes", "on"):
            super().error(message, ex)
        parser = getattr(ex, "subcommand_parser", None) or self
        sys.stderr.write(f"lit-marl: error: {explain(message, ex, parser)}\n")
        sys.stderr.write("  jsonargparse's report:\n" + textwrap.indent(message.rstrip(), "    ") + "\n")
        words = parser.prog.split()
        command = f"lit-marl {words[-1]}" if len(words) > 1 else "lit-marl"
        sys.stderr.write(f"  every option: {command} --help\n")
        self.exit(2)


def explain(message: str, ex: BaseException | None = None, parser: Any = None) -> str:
    """One line for jsonargparse's error ``message`` (and the exception ``ex`` behind it): the field first, then the
    value and what is allowed; for an unknown key the closest accepted keys of its level; for YAML the file and
    line. Falls back to jsonargparse's innermost message."""
    yaml_error = find_cause(ex, yaml.MarkedYAMLError)
    if yaml_error is not None:
        return _explain_yaml(yaml_error)
    problem = _walk(message)
    field = ".".join(problem.path)
    if problem.kind == "type":
        return _explain_type(field, problem)
    if problem.kind == "unknown":
        return _explain_unknown(problem, parser)
    if problem.kind == "required":
        return f"{field}: required, and not given"
    if problem.kind == "class":
        hint = _class_hint(problem.value or "")
        return f"{field}: {problem.value!r} cannot be used ({problem.detail}){'; ' + hint if hint else ''}"
    if problem.kind == "choice":
        hint = did_you_mean(problem.value or "", problem.expected).strip()
        return (f"{field or 'subcommand'}: {problem.value!r} is not one of {', '.join(problem.expected)}"
                f"{'; ' + hint if hint else ''}")
    return f"{field}: {problem.detail}" if field else problem.detail


@dataclasses.dataclass
class _Problem:
    """The innermost error of jsonargparse's report, and where it is."""

    path: tuple[str, ...]
    kind: str  # "type", "unknown", "required", "class", "choice" or "other"
    value: str | None = None
    expected: list[str] = dataclasses.field(default_factory=list)
    owner: str | None = None  # class_path of the class whose init_args hold the field
    detail: str = ""


def _walk(text: str, path: tuple[str, ...] = (), owner: str | None = None) -> _Problem:
    """Follow jsonargparse's nested report (``Parser key "k":`` / ``Problem with given class_path 'c':`` / a Union's
    ``Errors:``, each nesting indented) down to its innermost error."""
    text = textwrap.dedent(text).strip("\n")
    head, _, body = text.partition("\n")
    head = head.strip()
    if m := re.match(r'Parser key "([^"]+)":\s*(.*)$', head):
        return _walk(_inner(m[2], body), path + tuple(m[1].split(".")), owner)
    if m := re.match(r"Problem with given class_path '([^']+)':\s*(.*)$", head):
        problem = _walk(_inner(m[2], body), path + ("init_args",), m[1])
        if problem.kind == "other" and problem.path == path + ("init_args",) and not _importable(m[1]):
            return _Problem(path + ("class_path",), "class", value=m[1], detail=problem.detail)
        return problem
    if head.startswith("Does not validate against any of the Union subtypes"):
        items = _union_errors(body)
        for item in items:  # a class_path branch is the one the user meant (the others are e.g. NoneType)
            if item.startswith("Problem with given class_path"):
                return _walk(item, path, owner)
        expected = [m[1] for item in items if (m := re.match(r"Expected an? (.+?)(?:\. Got value: .*)?$", item))]
        given = re.search(r"^\s*Given value: (.*)$", body, re.M)
        if expected:
            return _Problem(path, "type", value=_given(given[1]) if given else None, expected=expected, owner=owner)
        return _Problem(path, "other", owner=owner, detail=items[0].splitlines()[0] if items else head)
    if m := re.match(r"Expected an? (.+?)\. Got value: (.*)$", text, re.S):
        return _Problem(path, "type", value=m[2], expected=[m[1]], owner=owner)
    if m := re.match(r"Option '([^']+)' is not accepted", head):
        return _Problem(path + tuple(m[1].split(".")), "unknown", owner=owner)
    if m := re.match(r"Subcommand '[^']+' does not accept option '([^']+)'", head):
        return _Problem(path + tuple(m[1].split(".")), "unknown")
    if m := re.match(r"unrecognized arguments: (\S+)", head):
        return _Problem(path + tuple(m[1].lstrip("-").split("=")[0].split(".")), "unknown")
    if m := re.match(r"the following arguments are required: (.+)$", head):
        return _Problem(path + tuple(m[1].split(",")[0].strip().split(".")), "required", owner=owner)
    if m := re.match(r"argument (\S+): invalid choice: '([^']*)' \(choose from (.*)\)$", head):
        choices = [c.strip().strip("'\"") for c in m[3].split(",")]
        return _Problem(path + ((m[1],) if m[1] != "subcommand" else ()), "choice", value=m[2], expected=choices)
    return _Problem(path, "other", owner=owner, detail=head)


def _inner(rest_of_head: str, body: str) -> str:
    return rest_of_head + ("\n" + body if body else "") if rest_of_head else body


def _union_errors(body: str) -> list[str]:
    """The entries of a Union report's ``Errors:`` list, each dedented (nested reports keep their indentation)."""
    lines = body.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == "Errors:"), None)
    if start is None:
        return []
    items: list[list[str]] = []
    indent = None
    for line in lines[start + 1:]:
        stripped = line.lstrip()
        depth = len(line) - len(stripped)
        if stripped.startswith("- ") and (indent is None or depth == indent):
            indent = depth
            items.append([stripped[2:]])
        elif indent is not None and depth > indent and items:
            items[-1].append(line[indent + 2:])
        else:
            break
    return ["\n".join(item) for item in items]


def _given(value: str) -> str:
    """The value out of jsonargparse's ``Given value:`` (``NestedArg(key='lr', val='abc')`` for a command-line
    value inside a class's init_args)."""
    if m := re.fullmatch(r"NestedArg\(key='[^']*', val=(['\"])(.*)\1\)", value.strip()):
        return m[2]
    return value


_TYPE_WORDS = {"float": "a number", "int": "an integer", "bool": "true or false", "str": "a string",
               "NoneType": "null", "Sequence": "a list", "list": "a list", "tuple": "a list", "dict": "a mapping",
               "Mapping": "a mapping", "MutableMapping": "a mapping"}


def _type_name(expected: str) -> str:
    """``<class 'float'>`` → ``float``; ``<class 'collections.abc.Sequence'>`` → ``Sequence``."""
    if m := re.fullmatch(r"<class '([^']+)'>", expected):
        return m[1].rpartition(".")[2]
    return expected.replace("typing.", "")


def _explain_type(field: str, problem: _Problem) -> str:
    value = repr(problem.value) if problem.value is not None else "the value"
    literal = next((e for e in problem.expected if e.startswith(("typing.Literal[", "Literal["))), None)
    if literal is not None:
        choices = re.findall(r"'([^']*)'", literal)
        hint = did_you_mean(problem.value or "", choices).strip()
        return f"{field}: {value} is not one of {', '.join(map(repr, choices))}{'; ' + hint if hint else ''}"
    names = [_type_name(e) for e in problem.expected]
    words = " or ".join(dict.fromkeys(_TYPE_WORDS.get(n, f"a {n}") for n in names))
    expected = " | ".join("None" if n == "NoneType" else n for n in names)
    return f"{field}: {value} is not {words} (expected {expected})"


def _explain_unknown(problem: _Problem, parser: Any) -> str:
    field, key = ".".join(problem.path), problem.path[-1]
    accepted = _accepted_keys(problem.path[:-1], problem.owner, parser)
    hint = did_you_mean(key, accepted).strip()
    if hint:
        return f"{field}: unknown key; {hint}"
    if accepted:
        return f"{field}: unknown key; accepted keys there: {', '.join(sorted(accepted))}"
    return f"{field}: unknown key"


def _accepted_keys(level: tuple[str, ...], owner: str | None, parser: Any) -> list[str]:
    """The keys accepted beside a mistyped one: a class's init arguments (``owner`` is its class_path), or the
    parser's own options at ``level`` (``trainer.``, ``checkpoint.``, the top level)."""
    if owner is not None:
        return _init_args(owner)
    if parser is None:
        return []
    prefix = ".".join(level) + "." if level else ""
    dests = [getattr(a, "dest", "") for a in getattr(parser, "_actions", [])]
    return sorted({d[len(prefix):].split(".")[0] for d in dests
                   if d.startswith(prefix) and d != prefix and d not in ("help", "==SUPPRESS==")})


def _import(class_path: str) -> Any:
    module_name, _, name = class_path.rpartition(".")
    return getattr(importlib.import_module(module_name), name)


def _importable(class_path: str) -> bool:
    try:
        _import(class_path)
    except (ImportError, AttributeError, ValueError):
        return False
    return True


def _init_args(class_path: str) -> list[str]:
    """The init arguments jsonargparse accepts for a class (its own resolution, which follows ``super().__init__``
    calls), or its signature's named parameters."""
    try:
        cls = _import(class_path)
    except (ImportError, AttributeError, ValueError):
        return []
    try:
        probe = ArgumentParser(exit_on_error=False)
        probe.add_class_arguments(cls, fail_untyped=False, sub_configs=True)
        keys = {a.dest.split(".")[0] for a in probe._actions if a.dest not in ("help", "config")}
        if keys:
            return sorted(keys)
    except Exception:  # noqa: BLE001 - only a suggestion; fall back to the signature
        pass
    try:
        params = inspect.signature(cls.__init__).parameters.values()
    except (TypeError, ValueError):
        return []
    return sorted(p.name for p in params if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))


def _class_hint(class_path: str) -> str:
    """``did you mean 'lit_marl.algorithms.MAPPO'?`` for a misspelt class name in an importable module."""
    module_name, _, name = class_path.rpartition(".")
    try:
        module = importlib.import_module(module_name) if module_name else None
    except ImportError:
        return ""
    if module is None:
        return ""
    classes = [n for n, obj in vars(module).items() if inspect.isclass(obj) and not n.startswith("_")]
    return did_you_mean(name, classes, prefix=f"{module_name}.").strip()


def find_cause(err: BaseException | None, kind: type) -> Any:
    """The first exception of ``kind`` in ``err``'s chain of causes and contexts, or None."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, kind):
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


def _mark_file(err: BaseException, path: str) -> None:
    yaml_error = find_cause(err, yaml.MarkedYAMLError)
    if yaml_error is not None and getattr(yaml_error, "lit_marl_file", None) is None:
        yaml_error.lit_marl_file = path


def _explain_yaml(err: yaml.MarkedYAMLError) -> str:
    """``<file> line <n>: <what>``; a tab says so (YAML indents with spaces only)."""
    path = getattr(err, "lit_marl_file", None) or _READING.get()
    mark = err.problem_mark or err.context_mark
    where = f"{path or 'the YAML text'}" + (f" line {mark.line + 1}" if mark is not None else "")
    line = ""
    if path is not None and mark is not None:
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
            line = lines[mark.line] if mark.line < len(lines) else ""
        except OSError:
            pass
    problem = err.problem or ""
    if "\t" in line[: len(line) - len(line.lstrip())]:
        return f"{where}: a tab character indents this line; YAML allows spaces only"
    if "tab" in problem or "'\\t'" in problem or (mark is not None and line[mark.column: mark.column + 1] == "\t"):
        column = f" (column {mark.column + 1})" if mark is not None else ""
        return f"{where}: a tab character{column} where YAML does not allow one; use spaces"
    context = ""
    if err.context:
        context = f" ({err.context}" + (f" on line {err.context_mark.line + 1}" if err.context_mark else "") + ")"
    return f"{where}: {problem}{context}"
