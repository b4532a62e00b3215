"""Secrets: which files hold credentials, by their name and by their text.

Owns two decisions the walker makes before a file's text can reach a chunk, a vector, a store
or an agent: `secret_by_name` (credential files: `.env`, SSH and cloud keys, token files,
Terraform state...) and `find_secret` (key material inside any text: private-key blocks,
cloud access keys, provider tokens, JWTs, credentials assigned in code or config). A file that
either one flags is left out whole; the caller counts it and names it by path. A `Finding`
carries the rule's name and the line, never the matched text: nothing here logs, returns or
raises with a secret in it.

Why a curated rule set and not a maintained detector: `detect-secrets` 1.5.0 was measured on
the installed Starlette package (0.26 MB of Python) at 0.21 MB/s, and at 0.24 MB/s on this
repository's own `src/` (where it flagged two help texts, `postgresql://user:password@host`, as
credentials). Every file an index job reads is scanned, so at that speed the scan would cost
more than chunking and keyword indexing together (an hour for a 1 GB tree), and it would
bring `requests` and `pyyaml` along for nothing. The rules below follow gitleaks' public rule
design instead: each provider token is recognised by its fixed prefix and shape, and a rule's
regular expression runs only when one of its keywords occurs in the text (a plain substring
test), so ordinary code pays for a few `in` checks; the one generic rule (a `password=`-style
assignment) also demands a value that looks random, is not an expression, a reference to the
environment or a placeholder, which keeps it quiet on ordinary code (no file of Starlette nor
of this repository's `src/` is flagged). Measured: see `docs/benchmarks.md`.

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

# ------------------------------------------------------------------ by name

# Names (compared lower-cased) that are credentials whatever they hold.
SECRET_NAMES = frozenset({
    ".env", ".npmrc", ".pypirc", ".netrc", "_netrc", ".git-credentials", ".pgpass",
    ".htpasswd", ".dockercfg", "credentials", "secrets.yml", "secrets.yaml",
})
SECRET_PREFIXES = ("id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", ".env.", "credentials")
SECRET_SUFFIXES = (".env", ".key", ".pem", ".p12", ".pfx", ".kdbx", ".keystore", ".jks", ".ppk",
                   ".gpg", ".asc")
# Folders whose every file is a credential: cloud CLIs', SSH's and GnuPG's own homes.
SECRET_DIRS = frozenset({".aws", ".ssh", ".gnupg", ".docker", ".kube", ".azure", ".gcloud"})
_TFSTATE = re.compile(r"\.tfstate(\.|$)")
# A GCP service-account key as the console names it: `project-1a2b3c4d5e6f.json`.
_SERVICE_ACCOUNT = re.compile(r"(service[-_]?account|[a-z][a-z0-9-]{4,28}-[0-9a-f]{12}).*\.json$")


# `credentials.py`, `id_rsa.go`: code about credentials, not credentials.
_SOURCE_SUFFIXES = (".py", ".go", ".js", ".ts", ".rs", ".java", ".rb", ".kt", ".cs", ".md",
                    ".rst", ".c", ".h", ".cpp", ".php", ".swift", ".scala", ".sh")


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
class Rule:
    name: str
    keywords: tuple[str, ...]  # the regex runs only when one of these is in the text
    pattern: re.Pattern[str]
    lowered: bool = False  # keywords are looked up in the lower-cased text


def _rule(name: str, keywords: tuple[str, ...], pattern: str, *, flags: int = 0,
          lowered: bool = False) -> Rule:
    return Rule(name, keywords, re.compile(pattern, flags), lowered)


# Provider tokens have fixed prefixes and lengths: a match is a key (or a published example,
# which the allow-list below lets through).
RULES: tuple[Rule, ...] = (
    _rule("private-key", ("PRIVATE KEY",),
          # The block's body must follow (escaped newlines too, as in a JSON key file): code
          # that only names the marker (a PEM parser) is not a key.
          r"-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----"
          r"(?:\\[nr]|\s|[A-Za-z-]+:[^\n]{0,200}\n)*[A-Za-z0-9+/]{40,}"),
    _rule("putty-private-key", ("PuTTY-User-Key-File",),
          r"PuTTY-User-Key-File-\d: [\s\S]{0,400}Private-Lines: \d+"),
    _rule("aws-access-key", ("AKIA", "ASIA", "ABIA", "ACCA", "A3T"),
          r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}\b(?<!EXAMPLE)"),
    _rule("gcp-service-account", ("private_key_id",),
          r"\"private_key_id\"\s*:\s*\"[0-9a-f]{40}\""),
    _rule("google-api-key", ("AIza",), r"\bAIza[0-9A-Za-z_-]{35}\b"),
    _rule("github-token", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
          r"\bgh[pousr]_[A-Za-z0-9]{36,255}\b"),
    _rule("github-fine-grained-token", ("github_pat_",), r"\bgithub_pat_[A-Za-z0-9_]{60,255}\b"),
    _rule("gitlab-token", ("glpat-", "glptt-", "gldt-", "glrt-", "GR1348941"),
          r"\b(?:glpat-|glptt-|gldt-|glrt-|GR1348941)[A-Za-z0-9_-]{20,}"),
    _rule("slack-token", ("xox",), r"\bxox[abposre]-(?:\d+-)+[A-Za-z0-9-]{10,}"),
    _rule("slack-app-token", ("xapp-",), r"\bxapp-\d-[A-Z0-9]+-\d+-[a-z0-9]{20,}"),
    _rule("slack-webhook", ("hooks.slack.com",),
          r"hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9+/]{20,}"),
    _rule("stripe-key", ("_live_", "_test_", "_prod_"),
          r"\b(?:sk|rk)_(?:live|test|prod)_[A-Za-z0-9]{20,}\b"),
    _rule("anthropic-key", ("sk-ant-",), r"\bsk-ant-[A-Za-z0-9_-]{40,}"),
    _rule("openrouter-key", ("sk-or-",), r"\bsk-or-v\d-[A-Za-z0-9]{32,}"),
    _rule("openai-key", ("sk-",),
          r"\bsk-(?:(?:proj|svcacct|admin)-[A-Za-z0-9_-]{40,}"
          r"|[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}|[A-Za-z0-9]{48}\b)"),
    _rule("huggingface-token", ("hf_",), r"\bhf_[A-Za-z0-9]{34,}\b"),
    _rule("npm-token", ("npm_",), r"\bnpm_[A-Za-z0-9]{36}\b"),
    _rule("pypi-token", ("pypi-AgE",), r"\bpypi-AgE[A-Za-z0-9_-]{50,}"),
    _rule("jwt", ("eyJ",),
          r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{16,}"),
)

# `password = "..."`, `api_key: ...`, `DB_SECRET=...`, `"token": "..."`: a credential's name,
# an assignment, and a value (quoted or not), judged by `_looks_secret`.
# Where each of its names starts (lower-cased): the expression is tried at those places only,
# a few substring searches instead of a regular expression at every character (4x faster).
_ASSIGNMENT_STARTS = ("pass", "pwd", "secret", "token", "api", "access", "auth", "private",
                      "credential")
_ASSIGNMENT = re.compile(
    r"(?i)(?P<name>(?:passw(?:or)?d|\bpass\b|\bpwd\b|secret|token|api[_-]?key|access[_-]?key"
    r"|auth[_-]?key|private[_-]?key|credentials?)[A-Za-z0-9_.-]{0,30})"
    r"[\"']?[ \t]{0,4}(?::=|=>|==|=|:)[ \t]{0,4}"
    r"(?P<q>[\"'`]?)(?P<value>[^\s\"'`;,]{8,200})(?P=q)")
# Names about a credential rather than holding one: `password_encryption = scram-sha-256`,
# `publicKeyToken="1fc8..."`, `token_type: bearer2`.
_NOT_CREDENTIAL = re.compile(
    r"(?i)type|kind|length|encrypt|format|policy|field|name|file|path|url|uri|endpoint|count|"
    r"limit|size|expir|header|prefix|regex|pattern|mode|method|usage|public|version|label")
# `scheme://user:password@host`: a connection string with its password inline.
_URL_PASSWORD = re.compile(r"\b[a-z][a-z0-9+.-]{1,20}://[^\s:/@\"'`]{1,64}:(?P<value>[^\s:/@\"'`]{6,128})@")

# Values that are a placeholder, a reference or a template, not a secret.
_PLACEHOLDERS = ("xxx", "***", "...", "change", "example", "placeholder", "your", "dummy",
                 "fake", "redacted", "secret", "password", "passwd", "token", "sample",
                 "test", "todo", "replace", "insert", "<", ">", "${", "{{", "%(", "$(")
# An expression rather than a literal: a call, an index, a template, an env var.
_EXPRESSION = re.compile(r"[()\[\]{}$<>]")
# Where an unquoted value is code (a variable, `password = new_password`), not a literal as
# in `.env`, YAML or INI files.
CODE_SUFFIXES = frozenset({
    ".py", ".pyi", ".js", ".mjs", ".cjs", ".jsx", ".ts", ".tsx", ".go", ".java", ".kt", ".kts",
    ".scala", ".rb", ".rs", ".c", ".h", ".cc", ".cpp", ".hpp", ".cs", ".swift", ".php", ".lua",
    ".dart", ".ex", ".exs", ".erl", ".clj", ".hs", ".ml", ".vue", ".svelte", ".r", ".jl",
    ".pyx", ".pxd", ".css", ".scss", ".less", ".html", ".htm", ".xml", ".sql",
})


def _entropy(value: str) -> float:
    counts = Counter(value)
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _looks_secret(value: str) -> bool:
    """Whether an assigned literal is a credential: random-looking (a letter and a digit, or
    a letter and a symbol, and at least 3 bits a character), neither a placeholder nor an
    expression."""
    low = value.lower()
    if any(p in low for p in _PLACEHOLDERS) or _EXPRESSION.search(value):
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


def scan(text: str, path: str = "") -> Iterator[Finding]:
    """Every place in `text` that holds key material, rule by rule. `path` (its name is
    enough) says whether unquoted values are code or literals."""
    code = posixpath.splitext(path.lower())[1] in CODE_SUFFIXES
    lowered: str | None = None
    for rule in RULES:
        haystack = text
        if rule.lowered:
            lowered = lowered if lowered is not None else text.lower()
            haystack = lowered
        if not any(k in haystack for k in rule.keywords):
            continue
        for match in rule.pattern.finditer(text):
            yield Finding(rule.name, _line_of(text, match.start()))
    lowered = lowered if lowered is not None else text.lower()
    for match in _assignments(text, lowered):
        # In code an unquoted value is an expression (or prose, in a comment): only quoted
        # literals count there.
        if (match["q"] or not code) and _looks_secret(match["value"]) \
                and not _NOT_CREDENTIAL.search(lowered, max(0, match.start() - 12), match.end("name")):
            yield Finding("assigned-credential", _line_of(text, match.start()))
    if "://" in text:
        for match in _URL_PASSWORD.finditer(text):
            if _looks_secret(match["value"]):
                yield Finding("url-password", _line_of(text, match.start()))


def find_secret(text: str, path: str = "") -> Finding | None:
    """The first place in `text` that holds key material, or None: what the walker asks of
    every file it reads."""
    return next(scan(text, path), None)
