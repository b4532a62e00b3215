"""The reasons a walk leaves a file out, as counted in `WalkResult.skipped`, and the words
each one is said in when `read_one` refuses a file.

It owns the vocabulary only: which file earns which reason is decided elsewhere.
"""

from __future__ import annotations

from pathlib import Path

from fathom.errors import FathomError

# Skip reasons, as counted in WalkResult.skipped.
IGNORED_DIR = "ignored-dir"  # a directory from ALWAYS_SKIP_DIRS or a virtualenv: counted once
GITIGNORED = "gitignored"  # a file or a whole directory (counted once) matched by .gitignore
EXCLUDED = "excluded"  # matched by the caller's extra_ignores
FATHOMIGNORED = "fathomignored"  # a file or a whole directory matched by .fathomignore
BINARY = "binary"
TOO_LARGE = "too-large"
GENERATED = "generated"
MINIFIED = "minified"
DATA = "data"
EMPTY = "empty"
SYMLINK = "symlink"
SPECIAL = "special-file"  # FIFOs, sockets, devices: never opened for reading
UNREADABLE = "unreadable"
SLOW = "slow-read"  # a read that did not finish within READ_SECONDS
SECRET = "secret"  # a credential file by its name or folder (named by path); key material
#                   inside any other file is redacted, not skipped (`WalkResult.redacted`)
# Not a skip: files read with replacement characters or as Latin-1 (kept, but reported).
DECODED_WITH_REPLACEMENT = "decoded-with-replacement"
# Not a skip: files kept under a name whose undecodable bytes were escaped (reported).
ESCAPED_NAME = "escaped-name"


class WalkCancelled(FathomError):
    """The walk was cancelled between two entries (its job was cancelled)."""

    def __init__(self, root: Path):
        self.root = root
        super().__init__(f"the walk of {root} was cancelled")


# What each refusal of `read_one` means, in words a person (or a model) can act on.
WHY = {
    IGNORED_DIR: "it lies in a folder the index always leaves out (dependencies, build output, VCS metadata)",
    GITIGNORED: "it is ignored by .gitignore",
    FATHOMIGNORED: "it is excluded by .fathomignore",
    EXCLUDED: "it lies in a folder the server keeps to itself",
    BINARY: "it is a binary file",
    TOO_LARGE: "it is larger than the index reads",
    GENERATED: "it is machine-written (a lock file or generated code)",
    MINIFIED: "it is minified or bundled output",
    DATA: "it is a data or key file, not code or prose",
    EMPTY: "it is empty",
    SYMLINK: "it is reached through a symbolic link",
    SPECIAL: "it is not a regular file",
    UNREADABLE: "it cannot be read",
    SLOW: "reading it took too long",
    SECRET: "it is a credential file (by its name or its folder)",
}
RULES_FILE = "ignore-file"  # a .gitignore or .fathomignore: rules for the walk, not content
MISSING = "missing"


class ReadRefused(FathomError):
    """`read_one` will not read this file: a walk would not index it. `reason` is the skip
    reason a walk would count it under (`gitignored`, `data`, `too-large`, ...)."""

    def __init__(self, rel: str, reason: str):
        self.rel, self.reason = rel, reason
        why = WHY.get(reason) or {
            RULES_FILE: "it is an ignore file (rules, not content)",
            MISSING: "there is no such file",
        }.get(reason, reason)
        super().__init__(
            f"{rel} is not readable here: {why} ({reason}). Only files the index would take "
            f"are read; search the index, or read another file (the project's .fathomignore "
            f"decides what is taken)"
        )
