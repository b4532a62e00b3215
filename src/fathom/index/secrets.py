"""Secrets: which files are credentials by their name, and where a text holds key material.

Owns two decisions the walker makes before a file's text can reach a chunk, a vector, a store
or an agent. `secret_by_name` names credential files (`.env`, SSH and cloud keys, token files,
Terraform state...): such a file is left out whole. `secret_spans` finds key material inside
any other text (private-key blocks, cloud access keys, provider tokens, webhook URLs,
connection-string keys, JWTs, credentials assigned in code or config), and `redact` replaces
each found value with `[REDACTED:<rule>]`, keeping every line break of what it replaces, so the
file's code stays indexed at the same line numbers and only the value is gone. A `Finding` and a
`SecretSpan` carry the rule's name and where, never the matched text: nothing here logs,
returns or raises with a secret in it.

Why a curated rule set and not a maintained detector: `detect-secrets` 1.5.0 was measured on
the installed Starlette package (0.26 MB of Python) at 0.21 MB/s, and at 0.24 MB/s on this
repository's own `src/` (where it flagged two help texts, `postgresql://user:password@host`, as
credentials). Every file an index job reads is scanned, so at that speed the scan would cost
more than chunking and keyword indexing together (an hour for a 1 GB tree), and it would
bring `requests` and `pyyaml` along for nothing. The provider rules instead follow the families
of gitleaks' published rule file, as data (`fathom.index.secret_rules`: each family its
keywords and pattern): a rule's regular expression runs only when one of its keywords occurs in
the text (a plain substring test), so ordinary code pays for a few `in` checks. Measured
(`bench/secret_scan.py`): see `docs/benchmarks.md`.

The one generic rule (a `password=`-style assignment) demands a value that looks random and is
neither a reference nor a placeholder, judged by the kind of file (`file_kind`). In a
config or data file (YAML, JSON, INI, `.properties`, TOML, `.env`-like) a quoted value is a
literal: only the shapes of a reference make it one (`${VAR}`, `{{ var }}`, `$(cmd)`,
`%(name)s`, a whole `$VAR`, `<placeholder>`, as gitleaks' global allow-list has them), so
`password: "Hx7$kL9!..."` is a password. Anywhere else any of `$ ( ) [ ] { } < >` makes a value
an expression (a shell's `$VAR` in an unquoted `.env` value, code inside a JSON string), and
in code an unquoted value is code, not a literal. A value is a placeholder only when it is
mostly placeholder words (`changeme123`, `<your-token-here>`, `xxxxxxxx`), not when it merely
holds one. This keeps it quiet on ordinary code (no file of Starlette nor of this repository's
`src/` is flagged).

Refuses: to guess at secrets without a recognisable shape (a bare random string with no
`password`/`token`-style name is left alone), and to say what it matched.
"""

from __future__ import annotations

import math
import posixpath
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from fathom.index.secret_rules import ASSIGNED, RULES, URL_PASSWORD, Rule

# ------------------------------------------------------------------ by name

# Names (compared lower-cased) that are credentials whatever they hold.
SECRET_NAMES = frozenset(
    {
        ".env",
        ".npmrc",
        ".pypirc",
        ".netrc",
        "_netrc",
        ".git-credentials",
        ".pgpass",
        ".htpasswd",
        ".dockercfg",
        "credentials",
        "secrets.yml",
        "secrets.yaml",
    }
)
SECRET_PREFIXES = ("id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", ".env.", "credentials")
SECRET_SUFFIXES = (
    ".env",
    ".key",
    ".pem",
    ".p12",
    ".pfx",
    ".kdbx",
    ".keystore",
    ".jks",
    ".ppk",
    ".gpg",
    ".asc",
)
# Folders whose every file is a credential: cloud CLIs', SSH's and GnuPG's own homes.
SECRET_DIRS = frozenset({".aws", ".ssh", ".gnupg", ".docker", ".kube", ".azure", ".gcloud"})
_TFSTATE = re.compile(r"\.tfstate(\.|$)")
# A GCP service-account key as the console names it: `project-1a2b3c4d5e6f.json`.
_SERVICE_ACCOUNT = re.compile(r"(service[-_]?account|[a-z][a-z0-9-]{4,28}-[0-9a-f]{12}).*\.json$")


# `credentials.py`, `id_rsa.go`: code about credentials, not credentials.
_SOURCE_SUFFIXES = (
    ".py",
    ".go",
    ".js",
    ".ts",
    ".rs",
    ".java",
    ".rb",
    ".kt",
    ".cs",
    ".md",
    ".rst",
    ".c",
    ".h",
    ".cpp",
    ".php",
    ".swift",
    ".scala",
    ".sh",
)


def secret_by_name(rel: str) -> bool:
    """Whether the file at `rel` (relative, POSIX) is a credential file by its name or by the
    folder it lies in."""
    parts = rel.lower().split("/")
    name = parts[-1]
    if any(p in SECRET_DIRS for p in parts[:-1]):
        return True
    if name in SECRET_NAMES or name.endswith(SECRET_SUFFIXES):
        return True
    if name.startswith(SECRET_PREFIXES):
        return not name.endswith(_SOURCE_SUFFIXES)
    return bool(_TFSTATE.search(name) or _SERVICE_ACCOUNT.match(name))


# ------------------------------------------------------------------ by content


@dataclass(frozen=True)
class Finding:
    """Where a text holds key material: the rule that matched and the 1-based line. Never the
    matched text."""

    rule: str
    line: int


@dataclass(frozen=True)
class SecretSpan:
    """The characters `text[start:end]` hold key material found by `rule`: what `redact`
    replaces. Offsets only, never the text."""

    start: int
    end: int
    rule: str


@dataclass(frozen=True)
class Redacted:
    """A text with its key material replaced, and the rule of each value replaced."""

    text: str
    rules: tuple[str, ...]


MARKER = "[REDACTED:{rule}]"
_MARKED = re.compile(r"\[REDACTED:[a-z0-9-]+\]")

# `password = "..."`, `api_key: ...`, `DB_SECRET=...`, `"token": "..."`: a credential's name,
# an assignment, and a value: quoted (it may then hold `;` and `,`) or not, judged by
# `_looks_secret`. Where each of its names starts (lower-cased): the expression is tried at
# those places only, a few substring searches instead of a regular expression at every
# character (4x faster).
_ASSIGNMENT_STARTS = ("pass", "pwd", "secret", "token", "api", "access", "auth", "private", "credential")
_ASSIGNMENT = re.compile(
    r"(?i)(?P<name>(?:passw(?:or)?d|\bpass\b|\bpwd\b|secret|token|api[_-]?key|access[_-]?key"
    r"|auth[_-]?key|private[_-]?key|credentials?)[A-Za-z0-9_.-]{0,30})"
    r"[\"']?[ \t]{0,4}(?::=|=>|==|=|:)[ \t]{0,4}"
    r"(?P<q>[\"'`])?(?P<value>(?(q)[^\s\"'`]|[^\s\"'`;,]){8,200})(?(q)(?P=q))"
)
# Names about a credential rather than holding one: `password_encryption = scram-sha-256`,
# `publicKeyToken="1fc8..."`, `token_type: bearer2`.
_NOT_CREDENTIAL = re.compile(
    r"(?i)type|kind|length|encrypt|format|policy|field|name|file|path|url|uri|endpoint|count|"
    r"limit|size|expir|header|prefix|regex|pattern|mode|method|usage|public|version|label|"
    r"tokeni[sz]|class"
)
# `scheme://user:password@host`: a connection string with its password inline.
_URL_PASSWORD = re.compile(r"\b[a-z][a-z0-9+.-]{1,20}://[^\s:/@\"'`]{1,64}:(?P<value>[^\s:/@\"'`]{6,128})@")

# A reference or a template, in any kind of file: the value is looked up, not written here.
_TEMPLATE = re.compile(r"\$\{|\{\{|\$\(|%\(|#\{|<%")
_WHOLE_REFERENCE = re.compile(r"\$[A-Za-z_]\w*|%[A-Za-z_]\w*%|@[A-Za-z_]\w*@|<[^<>]+>")
# In code and prose, an expression: a call, an index, a template, a variable.
_EXPRESSION = re.compile(r"[()\[\]{}$<>]")
# Words a placeholder is made of: a value that is mostly these is not a credential.
_PLACEHOLDER_WORDS = (
    "changeme",
    "change",
    "example",
    "placeholder",
    "your",
    "dummy",
    "fake",
    "redacted",
    "secret",
    "password",
    "passwd",
    "token",
    "sample",
    "test",
    "todo",
    "fixme",
    "replace",
    "insert",
    "here",
    "xxx",
    "key",
    "api",
    "my",
    "foo",
    "bar",
    "demo",
    "default",
    "value",
    "none",
    "null",
    "enter",
    "put",
)

# Where an unquoted value is code (a variable, `password = new_password`), not a literal.
CODE_SUFFIXES = frozenset(
    {
        ".py",
        ".pyi",
        ".js",
        ".mjs",
        ".cjs",
        ".jsx",
        ".ts",
        ".tsx",
        ".go",
        ".java",
        ".kt",
        ".kts",
        ".scala",
        ".rb",
        ".rs",
        ".c",
        ".h",
        ".cc",
        ".cpp",
        ".hpp",
        ".cs",
        ".swift",
        ".php",
        ".lua",
        ".dart",
        ".ex",
        ".exs",
        ".erl",
        ".clj",
        ".hs",
        ".ml",
        ".vue",
        ".svelte",
        ".r",
        ".jl",
        ".pyx",
        ".pxd",
        ".css",
        ".scss",
        ".less",
        ".html",
        ".htm",
        ".xml",
        ".sql",
    }
)
# Config and data files: a value written in one is a literal unless it is shaped as a reference.
CONFIG_SUFFIXES = frozenset(
    {
        ".yml",
        ".yaml",
        ".json",
        ".jsonc",
        ".json5",
        ".ini",
        ".cfg",
        ".cnf",
        ".conf",
        ".properties",
        ".toml",
        ".env",
        ".tfvars",
        ".hcl",
        ".plist",
    }
)
CODE, CONFIG, TEXT = "code", "config", "text"


def file_kind(path: str) -> str:
    """`code`, `config` (config and data files: `.env`-like names too) or `text` (prose and
    the rest), by the file's name: how an assigned value is read."""
    name = posixpath.basename(path.lower())
    suffix = posixpath.splitext(name)[1]
    if suffix in CONFIG_SUFFIXES or name.startswith(".env"):
        return CONFIG
    return CODE if suffix in CODE_SUFFIXES else TEXT


def _entropy(value: str) -> float:
    counts = Counter(value)
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _placeholder(value: str) -> bool:
    """Whether the value is mostly placeholder words (`changeme123`, `token1234`): once they
    are taken out, no letter is left or at most a quarter of its letters and digits (three,
    for a short one). An elided value (`eyJhbGci...`, `sk-***`) is a placeholder too."""
    low = value.lower()
    if "..." in low or "***" in low:
        return True
    total = sum(c.isalnum() for c in low)
    for word in _PLACEHOLDER_WORDS:
        low = low.replace(word, "")
    rest = [c for c in low if c.isalnum()]
    return not any(c.isalpha() for c in rest) or len(rest) <= max(3, total // 4)


def _reference(value: str, literal: bool) -> bool:
    if _TEMPLATE.search(value) or _WHOLE_REFERENCE.fullmatch(value):
        return True
    return not literal and _EXPRESSION.search(value) is not None


def _looks_secret(value: str, literal: bool = False) -> bool:
    """Whether an assigned value is a credential: random-looking (a letter and a digit, or a
    letter and a symbol, and at least 3 bits a character), neither a reference, a placeholder
    nor a redaction already made. A `literal` (quoted in a config file) is a reference only by
    a reference's shape; any other value is one with any of `$ ( ) [ ] { } < >` in it."""
    if _MARKED.search(value) or _reference(value, literal) or _placeholder(value):
        return False
    if value.startswith(("/", "./", "http://", "https://")):
        return False  # a path or an address
    letters = any(c.isalpha() for c in value)
    digits = any(c.isdigit() for c in value)
    symbols = any(not c.isalnum() and c not in "_-./" for c in value)
    # Words with a colon or a hash (`"#version:"`) are not passwords; long ones may be.
    if not letters or not (digits or (symbols and len(value) >= 12)):
        return False
    return _entropy(value) >= 3.0


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def _assignments(text: str, lowered: str) -> Iterator[re.Match[str]]:
    if len(lowered) != len(text):  # lower-casing changed offsets (rare scripts): search it all
        yield from _ASSIGNMENT.finditer(text)
        return
    starts: set[int] = set()
    for name in _ASSIGNMENT_STARTS:
        at = lowered.find(name)
        while at >= 0:
            starts.add(at)
            at = lowered.find(name, at + 1)
    for at in sorted(starts):
        match = _ASSIGNMENT.match(text, at)
        if match is not None:
            yield match


# A key block's body between its first line and its end marker: base64, line breaks (real or
# escaped) and the quotes and `+` of string literals. Anything else means the marker found is
# not this block's.
_BODY = re.compile(r"[A-Za-z0-9+/=\s\"'`.,\\]*")
# A block with no end marker in reach: it runs on over lines of its body.
_BODY_TAIL = re.compile(r"(?:(?:\\[nr]|\s|[\"'`+.,\\])*[A-Za-z0-9+/=]{16,})*")
_BLOCK_REACH = 1 << 16


def _span_of(rule: Rule, match: re.Match[str]) -> tuple[int, int]:
    """What of a rule's match is the secret: its `secret` group, or the match, run on to the
    end of its block for a rule with an end marker."""
    if "secret" in rule.pattern.groupindex:
        return match.span("secret")
    start, end = match.span()
    if rule.end is None:
        return start, end
    text = match.string
    closing = rule.end.search(text, end, end + _BLOCK_REACH)
    if closing is not None and _BODY.fullmatch(text, end, closing.start()):
        return start, closing.end()
    tail = _BODY_TAIL.match(text, end)
    return start, tail.end() if tail is not None else end


def _matches(text: str, path: str) -> Iterator[tuple[str, int, int]]:
    """(rule, start, end) of every place in `text` that holds key material, rule by rule."""
    kind = file_kind(path)
    lowered: str | None = None
    for rule in RULES:
        haystack = text
        if rule.lowered:
            lowered = lowered if lowered is not None else text.lower()
            haystack = lowered
        if not any(k in haystack for k in rule.keywords):
            continue
        for match in rule.pattern.finditer(text):
            yield (rule.name, *_span_of(rule, match))
    lowered = lowered if lowered is not None else text.lower()
    for match in _assignments(text, lowered):
        # In code an unquoted value is an expression (or prose, in a comment): only quoted
        # literals count there.
        if (
            (match["q"] or kind != CODE)
            and _looks_secret(match["value"], bool(match["q"]) and kind == CONFIG)
            and not _NOT_CREDENTIAL.search(lowered, max(0, match.start() - 12), match.end("name"))
        ):
            yield (ASSIGNED, *match.span("value"))
    if "://" in text:
        for match in _URL_PASSWORD.finditer(text):
            if _looks_secret(match["value"]):
                yield (URL_PASSWORD, *match.span("value"))


def scan(text: str, path: str = "") -> Iterator[Finding]:
    """Every place in `text` that holds key material, rule by rule. `path` (its name is
    enough) says what kind of file it is: how assigned values are read."""
    for rule, start, _ in _matches(text, path):
        yield Finding(rule, _line_of(text, start))


def find_secret(text: str, path: str = "") -> Finding | None:
    """The first place in `text` that holds key material, or None."""
    return next(scan(text, path), None)


def secret_spans(text: str, path: str = "") -> list[SecretSpan]:
    """Where `text` holds key material, in order, overlapping finds merged (the first rule
    names the merged span)."""
    spans: list[SecretSpan] = []
    for rule, start, end in sorted(_matches(text, path), key=lambda m: (m[1], -m[2])):
        if spans and start < spans[-1].end:
            last = spans[-1]
            spans[-1] = SecretSpan(last.start, max(last.end, end), last.rule)
        elif end > start:
            spans.append(SecretSpan(start, end, rule))
    return spans


# What a redacted block keeps of each line: its indentation, the quotes and commas of string
# literals, and the `+` or `.` joining two of them (one with a quote or a line's end on either
# side: a `+` inside base64 is part of the key), so the code around a split key still parses.
_STRUCTURE = frozenset("\"'`,()\r")
_JOINER = re.compile(r"(?<![A-Za-z0-9/=])[ \t]*[+.][ \t]*(?![A-Za-z0-9/=])")


def _mask_line(line: str, first: bool) -> str:
    body = line if first else line.lstrip(" \t")
    joins = {m.start() + m.group().index(m.group().strip()) for m in _JOINER.finditer(body)}
    kept = "".join(c for i, c in enumerate(body) if c in _STRUCTURE or i in joins)
    tail = "\\" if body.endswith("\\") and not first else ""  # a line continuation
    return line[: len(line) - len(body)] + kept + tail


def _mask(secret: str, rule: str) -> str:
    """The marker in place of `secret`, with as many line breaks as it had."""
    marker = MARKER.format(rule=rule)
    if "\n" not in secret:
        return marker
    lines = secret.split("\n")
    return "\n".join([marker + _mask_line(lines[0], True), *(_mask_line(line, False) for line in lines[1:])])


def redact(text: str, path: str = "") -> Redacted:
    """`text` with every value `secret_spans` finds replaced by `[REDACTED:<rule>]`, each line
    where it was: the same number of lines, the rest of the text untouched."""
    spans = secret_spans(text, path)
    if not spans:
        return Redacted(text, ())
    parts, at = [], 0
    for span in spans:
        parts += [text[at : span.start], _mask(text[span.start : span.end], span.rule)]
        at = span.end
    parts.append(text[at:])
    return Redacted("".join(parts), tuple(s.rule for s in spans))
