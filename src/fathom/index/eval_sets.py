"""Question sets made from a project's own code, for `fathom eval`: quality with no labels.

What it owns: the three sets and how a hit is judged against one of their questions.

* **docstring** (CodeSearchNet's method): the first sentence of a Python function's, method's
  or class's docstring is the question, and its definition the answer. Every docstring is
  removed from the copy that is searched (`strip_docstrings`: the lines go blank, so every
  line number stays the original's), or the keyword half would find the question's own words.
* **identifier**: a definition's name in words (`BackgroundTasks` -> "background tasks",
  `get_environment_proxies` -> "get environment proxies"), the definition the answer: how a
  person describes a name they half remember.
* **questions**: the user's own question -> expected-file pairs, from a JSON or YAML file (a
  list of `{"question": ..., "file": ...}`, or a labelled set as semble's public benchmark
  writes it: `{"query": ..., "relevant": [...], "secondary": [...]}`); any chunk of an
  expected file answers.

Names of one or two words, dunder methods, tests, a sentence under three words, and a question
two definitions would answer (the same words twice) are left out: each question has one answer.
A `limit` keeps an even, reproducible spread over the project.

What it refuses to do: search or index (the service does, `fathom.service.evaluation`), and
read a questions file that names a file the project lacks (a typed error names the entry).

API:
    strip_docstrings(source) -> (source with docstrings blanked, [Documented])
    docstring_queries(files, limit) / identifier_queries(files, limit) -> [EvalQuery]
    read_questions(path, known_files) -> [EvalQuery]
    words_of(identifier) -> str;  sample(items, limit) -> list
"""

from __future__ import annotations

import ast
import inspect
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from fathom.errors import ConfigError
from fathom.index.store import CAMEL_PARTS

SETS = ("docstring", "identifier", "questions")
MIN_WORDS = 3  # a docstring sentence shorter than this asks nothing ("Return the value")
MIN_PARTS = 2  # a one-word name ("run", "parse") has an answer in every project

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_T = TypeVar("_T")


@dataclass(frozen=True)
class EvalQuery:
    """One question and its answer: a file, and the definition's line in it (None: any chunk
    of the file answers)."""

    text: str
    kind: str  # "docstring", "identifier" or "questions"
    path: str  # relative to the project root, POSIX separators
    line: int | None = None
    others: tuple[str, ...] = ()  # further files that answer it too (a labelled set's)

    @property
    def paths(self) -> tuple[str, ...]:
        return (self.path, *self.others)

    def answered_by(self, path: str, start_line: int, end_line: int) -> bool:
        if path not in self.paths:
            return False
        return self.line is None or path != self.path or start_line <= self.line <= end_line


@dataclass(frozen=True)
class Documented:
    """A definition whose docstring `strip_docstrings` removed."""

    name: str  # Class.method
    line: int  # the def/class line (1-based)
    docstring: str


def first_sentence(doc: str) -> str:
    paragraph = " ".join(doc.strip().split("\n\n")[0].split())
    return _SENTENCE_END.split(paragraph)[0].rstrip(".").strip()


def words_of(identifier: str) -> str:
    """An identifier as the words a person would type: snake_case and CamelCase split, lower
    case (`HTTPTransport` -> "http transport")."""
    return " ".join(p.lower() for part in identifier.split("_") for p in CAMEL_PARTS.findall(part))


def _docstring_node(node: ast.AST) -> ast.Expr | None:
    body = getattr(node, "body", None)
    if not body:
        return None
    first = body[0]
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        return first
    return None


def _text_of(doc: ast.Expr) -> str:
    value = doc.value.value if isinstance(doc.value, ast.Constant) else None
    return inspect.cleandoc(value) if isinstance(value, str) else ""


def _definitions(tree: ast.Module) -> Iterable[tuple[str, ast.AST]]:
    def visit(node: ast.AST, scope: str) -> Iterable[tuple[str, ast.AST]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{scope}.{child.name}" if scope else child.name
                yield name, child
                yield from visit(child, name)

    yield from visit(tree, "")


def strip_docstrings(source: str) -> tuple[str, list[Documented]]:
    """`source` with every docstring (module, class, function) blanked line for line, and the
    definitions whose docstring went. A docstring that shares a line with other code is left
    alone and its definition not listed; a body that was only a docstring becomes `pass`.
    Source that does not parse is returned as it is."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return source, []
    lines = source.splitlines()
    found: list[Documented] = []
    nodes: list[tuple[str | None, ast.AST]] = [(None, tree)]
    nodes.extend(_definitions(tree))
    for name, node in nodes:
        doc = _docstring_node(node)
        if doc is None or doc.end_lineno is None:
            continue
        start, end = doc.lineno, doc.end_lineno
        body: list[ast.stmt] = getattr(node, "body", [])
        shares = (name is not None and start == getattr(node, "lineno", 0)) or (
            len(body) > 1 and body[1].lineno == end
        )
        before = lines[start - 1][: doc.col_offset]
        after = lines[end - 1][doc.end_col_offset or 0 :]
        if shares or before.strip() or (after.strip() and not after.strip().startswith("#")):
            continue
        for i in range(start - 1, end):
            lines[i] = ""
        if len(body) == 1:  # the docstring was the whole body
            lines[start - 1] = before + "pass"
        if name is not None:
            found.append(Documented(name, getattr(node, "lineno", start), _text_of(doc)))
    text = "\n".join(lines) + ("\n" if source.endswith("\n") else "")
    return text, found


def _is_test(path: str) -> bool:
    return any("test" in part.lower() for part in path.split("/"))


def _skipped_name(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return (last.startswith("__") and last.endswith("__")) or "test" in last.lower()


def sample(items: Sequence[_T], limit: int | None) -> list[_T]:
    """At most `limit` of `items`, evenly spread (every n-th), the same on every run."""
    if limit is None or len(items) <= limit:
        return list(items)
    step = len(items) / limit
    return [items[int(i * step)] for i in range(limit)]


def _unique(queries: list[EvalQuery]) -> list[EvalQuery]:
    """Drop every question asked twice: two answers to one question measure nothing."""
    count: dict[str, int] = {}
    for q in queries:
        count[q.text.lower()] = count.get(q.text.lower(), 0) + 1
    return [q for q in queries if count[q.text.lower()] == 1]


def docstring_queries(documented: dict[str, list[Documented]], limit: int | None = None) -> list[EvalQuery]:
    """One question per documented definition (`{path: strip_docstrings' list}`)."""
    out = []
    for path in sorted(documented):
        if _is_test(path):
            continue
        for d in documented[path]:
            text = first_sentence(d.docstring)
            if _skipped_name(d.name) or len(text.split()) < MIN_WORDS:
                continue
            out.append(EvalQuery(text, "docstring", path, d.line))
    return sample(_unique(out), limit)


def identifier_queries(sources: dict[str, str], limit: int | None = None) -> list[EvalQuery]:
    """One question per named definition of the Python files (`{path: source}`): its name in
    words, answered by its def/class line."""
    out = []
    for path in sorted(sources):
        if _is_test(path) or not path.endswith((".py", ".pyi")):
            continue
        try:
            tree = ast.parse(sources[path])
        except (SyntaxError, ValueError):
            continue
        for name, node in _definitions(tree):
            last = name.rsplit(".", 1)[-1]
            words = words_of(last)
            if _skipped_name(name) or len(words.split()) < MIN_PARTS:
                continue
            out.append(EvalQuery(words, "identifier", path, getattr(node, "lineno", 1)))
    return sample(_unique(out), limit)


def _entry(entry: Any) -> tuple[str | None, list[str]]:
    """(question, answer files) of one entry, in either form (module docstring)."""
    if not isinstance(entry, dict):
        return None, []
    question = entry.get("question", entry.get("query"))
    if not isinstance(question, str) or not question.strip():
        return None, []
    if "file" in entry:
        targets: list[Any] = [entry["file"]]
    else:
        targets = [*(entry.get("relevant") or ()), *(entry.get("secondary") or ())]
    files = []
    for t in targets:
        file = t.get("path") if isinstance(t, dict) else t
        if not isinstance(file, str) or not file.strip():
            return None, []
        file = file.strip().replace("\\", "/").removeprefix("./")
        if file not in files:
            files.append(file)
    return question.strip(), files


def read_questions(path: Path, known_files: Iterable[str]) -> list[EvalQuery]:
    """The user's question -> expected-file pairs: a JSON or YAML list of
    `{"question": ..., "file": ...}`, or a labelled set in the form semble's public benchmark
    uses (`{"query": ..., "relevant": [...], "secondary": [...]}`, each target a path or a
    `{path, start_line, end_line}`, read as its whole file; any target answers), each file
    relative to the project root."""
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"cannot read the questions file {path}: {exc.strerror}; give a "
            f"JSON or YAML file of {{question, file}} entries"
        ) from None
    data: Any
    try:
        if path.suffix.lower() in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(raw)
        else:
            data = json.loads(raw)
    except ValueError as exc:  # json.JSONDecodeError and yaml.YAMLError's parse errors
        raise ConfigError(
            f"the questions file {path} does not parse ({exc}); write a list of "
            f'{{"question": ..., "file": ...}} entries'
        ) from None
    except Exception as exc:  # noqa: BLE001 - yaml.YAMLError is not a ValueError
        raise ConfigError(
            f"the questions file {path} does not parse ({type(exc).__name__}); "
            f'write a list of {{"question": ..., "file": ...}} entries'
        ) from None
    if not isinstance(data, list) or not data:
        raise ConfigError(
            f"the questions file {path} holds no list of questions; write a list "
            f'of {{"question": ..., "file": ...}} entries'
        )
    known = set(known_files)
    out = []
    for i, entry in enumerate(data, start=1):
        question, files = _entry(entry)
        if question is None or not files:
            raise ConfigError(
                f'entry {i} of {path} needs a non-empty "question" and a '
                f'"file" (the expected file, relative to the project root), or '
                f'a labelled "query" with its "relevant" files'
            )
        for file in files:
            if file not in known:
                raise ConfigError(
                    f"entry {i} of {path} expects {file!r}, which the project's "
                    f"index does not hold; give the path relative to the project "
                    f"root"
                )
        out.append(EvalQuery(question, "questions", files[0], others=tuple(files[1:])))
    return out
