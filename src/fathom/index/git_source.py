"""A project's files from a git remote: the `git` command line, run as a subprocess.

What this module owns:

* Checking a remote URL before anything is written: its scheme (https, http, ssh, scp-like
  `user@host:path`, file), no credentials inside it, and the operator's allow-list of remote
  prefixes (`FATHOM_GIT_REMOTES`). A `file://` remote is also followed to what git would read
  (links, a `gitdir:` file, `objects/info/alternates`: `fathom.index.git_local`), all of which
  must lie inside an allowed folder by real path; git is then given that real folder. The
  check is made again before every command that reads the remote, not only at the add.
* Running `git` with a timeout, no terminal prompt, and the operator's credentials passed
  through the environment only (an SSH key file through `GIT_SSH_COMMAND`, an HTTPS token as
  an `http.extraHeader` through `GIT_CONFIG_*` variables): never on a command line another user
  could read in `ps`, never in a message, a log line or a file.
* Telling git's failures apart as typed errors that name the fix (`GitUnreachable`,
  `GitAuthFailed`, `GitBranchMissing`), with every URL's userinfo and the token scrubbed.
* A bare clone per project (no working tree, no hooks, private modes whatever the umask),
  fetched branch by branch within FATHOM_GIT_MAX_FETCH_BYTES, and the files of a commit
  written out (`git archive`, streamed into the folder as it comes: a repository of any size
  costs a tar block of memory, not its size) — whole, or only the paths a diff names — within
  the per-file and per-tree bounds, 0600/0700 (`fathom.index.git_export`).

What it refuses to do: speak any git protocol itself, keep a working tree, or index anything
(`fathom.service.git_projects` decides what to index and when).
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import unquote, urlsplit

from fathom.errors import ConfigError, FathomError
from fathom.index import git_export
from fathom.index.git_export import ATTRIBUTES, Exported, GitLimits, Plan, private_folder
from fathom.index.git_local import reach
from fathom.index.indexer import Discovery
from fathom.index.walker import IGNORE_FILES
from fathom.index.walking.roots import under_roots

_SCP_LIKE = re.compile(r"^(?:[A-Za-z0-9._-]+@)?[A-Za-z0-9.-]+:(?!//)[^\s]+$")
_TRANSPORT = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*::")
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]*@")
_BRANCH = re.compile(r"^(?![/-])(?!.*//)(?!.*\.\.)(?!.*@\{)[A-Za-z0-9._/+-]{1,200}(?<![/.])$")
SCHEMES = ("https", "http", "ssh", "git", "file")


class GitRemoteInvalid(ConfigError):
    """The remote URL is not one git can use, or carries credentials."""


class GitRemoteNotAllowed(ConfigError):
    """The remote lies outside the operator's allow-list (`FATHOM_GIT_REMOTES`)."""


class GitUnreachable(FathomError):
    """The remote did not answer (no such host, refused, timed out, not a repository)."""


class GitAuthFailed(FathomError):
    """The remote refused the credentials (or asked for some and none were configured)."""


class GitTreeUnsafe(FathomError):
    """A commit whose tree names a path outside its own folder (`..`, `.`, an absolute path):
    a crafted remote; nothing of it is written or removed."""


class GitBranchMissing(ConfigError):
    """A branch asked for does not exist on the remote."""


def scrub(text: str, secrets: Sequence[str] = ()) -> str:
    """`text` with every URL's userinfo and every secret replaced."""
    text = _USERINFO.sub(lambda m: m.group("scheme") + "***@", text)
    for s in secrets:
        if s:
            text = text.replace(s, "***")
    return text


def check_branch(branch: object) -> str:
    if not isinstance(branch, str) or not _BRANCH.match(branch) or branch.endswith(".lock"):
        raise ConfigError(
            f"invalid branch name {scrub(str(branch))[:80]!r}: give a branch as the "
            f"remote names it, e.g. `main` or `release/1.2` (letters, digits and `._/+-`, "
            f"not beginning with `-` or `/`, no `..`)"
        )
    return branch


def check_remote(url: object, allowed: Sequence[str]) -> str:
    """The URL as given, once it is a git remote without credentials inside the allow-list
    (for a `file://` remote, by the real paths git would read too: `local_repository`)."""
    local_repository(_check_remote_text(url, allowed), allowed)
    return str(url)


def _check_remote_text(url: object, allowed: Sequence[str]) -> str:
    """The URL as given, once it is a git remote without credentials inside the allow-list.

    The allow-list is compared part by part, never as raw text: the scheme, user (when the
    entry names one), host and port exactly, and the path folder by folder (an entry
    `https://host/team` allows `https://host/team/app.git`, not `https://host/teamevil/`).
    A path with `.` or `..` folders (also percent-encoded) or a backslash is refused outright:
    git and the server would resolve them and land outside the folder the entry names."""
    if (
        not isinstance(url, str)
        or not url.strip()
        or len(url) > 2000
        or any(c.isspace() or ord(c) < 32 for c in url)
    ):
        raise GitRemoteInvalid(
            "invalid git remote: give a URL such as https://host/team/repo.git, "
            "ssh://git@host/team/repo.git, git@host:team/repo.git or "
            "file:///srv/git/repo.git"
        )
    shown = scrub(url)
    if _TRANSPORT.match(url):
        raise GitRemoteInvalid(
            f"invalid git remote {shown}: git's `TRANSPORT::ADDRESS` form is "
            f"not accepted; use one of the schemes {', '.join(SCHEMES)}"
        )
    if "://" in url:
        parts = urlsplit(url)
        if parts.scheme not in SCHEMES or (parts.scheme != "file" and not parts.hostname):
            raise GitRemoteInvalid(
                f"invalid git remote {shown}: use one of the schemes "
                f"{', '.join(SCHEMES)} with a host (file:// with a path)"
            )
        if parts.password is not None or (parts.username and parts.scheme in ("http", "https")):
            raise GitRemoteInvalid(
                f"git remote {shown} carries credentials: remove them from the "
                f"URL and set FATHOM_GIT_TOKEN (HTTPS) or FATHOM_GIT_SSH_KEY_FILE "
                f"(SSH) in the server's configuration instead"
            )
    elif not _SCP_LIKE.match(url) or "::" in url:
        raise GitRemoteInvalid(
            f"invalid git remote {shown}: give a URL such as "
            f"https://host/team/repo.git or git@host:team/repo.git (only the "
            f"transports {', '.join(SCHEMES)} and scp-like SSH are accepted)"
        )
    try:
        where = remote_parts(url)
    except ValueError as exc:
        raise GitRemoteInvalid(f"invalid git remote {shown}: {exc}") from None
    if not any(_within(where, entry) for entry in allowed):
        raise GitRemoteNotAllowed(
            f"git remote {shown} is not allowed on this server: the operator lists the allowed "
            f"remote prefixes in FATHOM_GIT_REMOTES (separated by spaces), e.g. "
            f"`https://github.com/myteam/`"
            + ("" if allowed else "; none is set, so no remote is allowed yet")
        )
    return url


def local_repository(url: str, allowed: Sequence[str] | None) -> Path | None:
    """For a `file://` remote, the real folder of the repository git would open there, once
    everything git would read through (a link, a `gitdir:` file, a common folder, alternate
    object folders) lies inside the real folder of an allowed `file://` entry; otherwise
    GitRemoteNotAllowed naming FATHOM_GIT_REMOTES (`allowed` None: not checked). None for a
    remote of another scheme, or when no repository is there (git says so itself). Git
    ignores a file URL's host, so the entries' hosts do not matter here (the URL was compared
    with them part by part before)."""
    where = remote_parts(url)
    if where[0] != "file":
        return None
    found = reach("/" + "/".join(where[4]))
    if allowed is None:
        return found.git_dir
    roots = []
    for entry in allowed:
        try:
            scheme, _, _, _, folders = remote_parts(entry.strip())
        except ValueError:
            continue
        if scheme == "file":
            roots.append(Path(os.path.realpath("/" + "/".join(folders))))
    outside = [p for p in found.paths if not under_roots(p, roots)]
    if outside:
        raise GitRemoteNotAllowed(
            f"git remote {scrub(url)} leads outside the folders FATHOM_GIT_REMOTES allows: git "
            f"would read {outside[0]} (through a symbolic link, a `.git` file's `gitdir:`, a "
            f"linked worktree's `commondir` or `objects/info/alternates`), and the allowed "
            f"folders are {', '.join(map(str, roots)) or 'none'} once links are followed. Give "
            f"the repository's own path inside an allowed folder, or have the operator add its "
            f"real folder to FATHOM_GIT_REMOTES"
        )
    return found.git_dir


_PORTS = {"https": 443, "http": 80, "ssh": 22, "git": 9418}


def remote_parts(url: str) -> tuple[str, str | None, str, int | None, tuple[str, ...]]:
    """(scheme, user, host, port, path folders) of a remote URL or allow-list entry, each
    folder percent-decoded; ValueError for a path git would resolve elsewhere (`.`, `..`,
    a backslash, an encoded slash), a query or a fragment, or an option-like host."""
    if "\\" in url:
        raise ValueError("a backslash is not allowed in a remote")
    if "://" in url:
        parts = urlsplit(url)
        if parts.query or parts.fragment or "?" in url or "#" in url:
            raise ValueError("a remote has no query or fragment (`?`, `#`)")
        scheme, user, host = parts.scheme.lower(), parts.username, (parts.hostname or "").lower()
        port = parts.port or _PORTS.get(scheme)  # ValueError for a port that is not a number
        if scheme == "file" and host in ("", "localhost"):
            host = ""
        path, absolute = parts.path, True
    else:
        head, _, path = url.partition(":")
        user, _, host = head.rpartition("@")
        scheme, user, host, port, absolute = "scp", user or None, host.lower(), None, path.startswith("/")
    if host.startswith("-") or (user or "").startswith("-"):
        raise ValueError("a host or user may not begin with '-'")
    folders = [unquote(f) for f in path.split("/") if f]
    if any(f in (".", "..") or "/" in f or "\\" in f for f in folders):
        raise ValueError(
            "its path may not hold `.` or `..` folders or an encoded slash "
            "(percent-encoded ones included): name the repository's own path"
        )
    return scheme, user, host, port, ("/",) * (scheme == "scp" and absolute) + tuple(folders)


def _within(where: tuple[str, str | None, str, int | None, tuple[str, ...]], entry: str) -> bool:
    """Whether a remote's parts lie under an allow-list entry (a folder prefix)."""
    try:
        scheme, user, host, port, folders = remote_parts(entry.strip())
    except ValueError:
        return False  # an entry git would resolve elsewhere allows nothing
    return (
        where[0] == scheme
        and (user is None or where[1] == user)
        and where[2] == host
        and where[3] == port
        and where[4][: len(folders)] == folders
    )


@dataclass(frozen=True)
class Credentials:
    """The operator's git credentials. `token` is sent as HTTPS basic auth by header; the key
    file is handed to ssh by path. Neither is ever part of a message."""

    ssh_key_file: Path | None = None
    token: str | None = field(default=None, repr=False)  # never in a repr, a log line, a trace
    username: str = "x-access-token"

    def environment(self) -> dict[str, str]:
        env: dict[str, str] = {}
        if self.ssh_key_file is not None:
            key = str(self.ssh_key_file).replace("'", "'\\''")
            env["GIT_SSH_COMMAND"] = (
                f"ssh -i '{key}' -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=accept-new"
            )
        if self.token:
            pair = base64.b64encode(f"{self.username}:{self.token}".encode()).decode()
            env |= {
                "GIT_CONFIG_COUNT": "1",
                "GIT_CONFIG_KEY_0": "http.extraHeader",
                "GIT_CONFIG_VALUE_0": f"Authorization: Basic {pair}",
            }
        return env

    def secrets(self) -> list[str]:
        if not self.token:
            return []
        return [self.token, base64.b64encode(f"{self.username}:{self.token}".encode()).decode()]


@dataclass(frozen=True)
class Change:
    """One path of a diff between two commits: `gone` when the newer commit has no file there."""

    path: str
    gone: bool


def _reason(stderr: str) -> str:
    """The line of git's error output that says what went wrong: its first `fatal:` or `error:`
    line (the lines after it are advice such as "Please make sure you have the correct access
    rights"), else its last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in lines:
        if line.startswith(("fatal:", "error:")):
            return line
    return lines[-1] if lines else "no output"


class GitRepo:
    """One project's bare clone, and the `git` commands run on it or on its remote."""

    def __init__(
        self,
        path: Path,
        url: str,
        credentials: Credentials,
        *,
        timeout_s: float = 120.0,
        allowed: Sequence[str] | None = None,
        limits: GitLimits | None = None,
    ):
        """`allowed`: the allow-list the remote is checked against before every command that
        reads it (None: the caller vouches for the URL, as a test does)."""
        self.path, self.url, self.credentials, self.timeout_s = Path(path), url, credentials, timeout_s
        self.allowed, self.limits = allowed, limits or GitLimits()

    def remote(self) -> str:
        """What git is given for the remote: a `file://` remote's real repository folder (so
        the folder checked is the folder read), the URL as given otherwise. Checked against
        the allow-list first, every time: a link placed in an allowed folder after the add
        is refused at the next sync."""
        if self.allowed is not None:
            real = local_repository(_check_remote_text(self.url, self.allowed), self.allowed)
        else:
            try:
                real = local_repository(self.url, None)
            except ValueError:
                real = None  # not a URL this module makes sense of: git says what it is
        return real.as_uri() if real is not None else self.url

    # ---- running git

    def _env(self) -> dict[str, str]:
        keep = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "SSH_ASKPASS"))}
        return (
            keep
            | {
                "GIT_TERMINAL_PROMPT": "0",
                "GIT_ASKPASS": "true",
                "SSH_ASKPASS": "true",
                "GCM_INTERACTIVE": "never",
                "LC_ALL": "C",
            }
            | self.credentials.environment()
        )

    def _command(self, args: Sequence[str], bare: bool) -> list[str]:
        # Every object fetched is checked by git itself (a tree entry `..` or `.git` refused);
        # zero-padded file modes, a harmless quirk of some old repositories, are let through.
        # Whatever git creates in the clone is its user's alone (0600/0700), whatever the umask.
        cmd = [
            "git",
            "-c",
            "credential.helper=",
            "-c",
            "transfer.fsckObjects=true",
            "-c",
            "fetch.fsck.zeroPaddedFilemode=ignore",
            "-c",
            "core.sharedRepository=0600",
        ]
        if bare:
            cmd += ["--git-dir", str(self.path)]
        return cmd + list(args)

    def _timed_out(self) -> GitUnreachable:
        return GitUnreachable(
            f"git remote {scrub(self.url)} did not answer within {self.timeout_s:.0f}s: check "
            f"that the host is up and reachable from this server, or raise "
            f"FATHOM_GIT_TIMEOUT_S"
        )

    def git(
        self, *args: str, bare: bool = True, remote: bool = False, max_file_bytes: int | None = None
    ) -> bytes:
        """Run `git args…` (in the bare clone when `bare`; no file it writes larger than
        `max_file_bytes`); the failure as a typed error."""
        command = self._command(args, bare)
        if max_file_bytes is not None:
            command = git_export.file_size_limited(command, max_file_bytes)
        try:
            done = subprocess.run(
                command, capture_output=True, env=self._env(), timeout=self.timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            raise self._timed_out() from None
        if done.returncode != 0:
            raise self._failure(done.stderr.decode("utf-8", "replace"), remote)
        return done.stdout

    @contextlib.contextmanager
    def streamed(self, *args: str) -> Iterator[IO[bytes]]:
        """`git args…` in the bare clone, its output read as it comes (never held whole), the
        whole run bounded by the timeout. Git's failure (or the timeout) is raised as `git`
        raises it, rather than the reader's error at the output's abrupt end; a reader that
        fails on its own stops git too."""
        with tempfile.TemporaryFile() as stderr:
            proc = subprocess.Popen(
                self._command(args, bare=True),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
                env=self._env(),
            )
            assert proc.stdout is not None
            killed = threading.Event()

            def stop() -> None:
                killed.set()
                proc.kill()

            timer = threading.Timer(self.timeout_s, stop)
            timer.start()
            try:
                yield proc.stdout
                proc.stdout.read()  # what the reader left (a tar's end blocks), so git can end
                code: int | None = proc.wait()
            except Exception:
                try:
                    code = proc.wait(timeout=5)  # git's own failure ends its output too
                except subprocess.TimeoutExpired:
                    code = None  # still writing: the reader failed on its own
                if not killed.is_set() and not code:
                    raise
            finally:
                timer.cancel()
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                proc.stdout.close()
            if killed.is_set():
                raise self._timed_out() from None
            if code:
                stderr.seek(0)
                raise self._failure(stderr.read().decode("utf-8", "replace"), False) from None

    def _failure(self, stderr: str, remote: bool) -> FathomError:
        said = scrub(_reason(stderr), self.credentials.secrets())[:300]
        low = stderr.lower()
        shown = scrub(self.url)
        if remote and any(
            s in low
            for s in (
                "authentication failed",
                "could not read username",
                "could not read password",
                "permission denied",
                "401",
                "403",
                "terminal prompts disabled",
            )
        ):
            return GitAuthFailed(
                f"git remote {shown} refused the credentials ({said}): set a valid "
                f"FATHOM_GIT_TOKEN (HTTPS) or FATHOM_GIT_SSH_KEY_FILE (SSH) with read access to "
                f"the repository, then restart the server"
            )
        if remote:
            return GitUnreachable(
                f"git remote {shown} cannot be read ({said}): check the URL, that the host is "
                f"reachable from this server and that the repository exists"
            )
        return FathomError(
            f"git failed in {self.path} ({said}): remove {self.path} and add the project again"
        )

    # ---- the remote

    def remote_heads(self) -> dict[str, str]:
        """Branch -> commit on the remote (one round trip; no clone needed)."""
        out = self.git("ls-remote", "--heads", "--", self.remote(), bare=False, remote=True)
        heads = {}
        for line in out.decode("utf-8", "replace").splitlines():
            sha, _, ref = line.partition("\t")
            if ref.startswith("refs/heads/"):
                heads[ref.removeprefix("refs/heads/")] = sha
        return heads

    def remote_default(self) -> str | None:
        """The branch the remote's HEAD names, when it says."""
        out = self.git("ls-remote", "--symref", "--", self.remote(), "HEAD", bare=False, remote=True)
        m = re.search(rb"^ref: refs/heads/(\S+)\tHEAD", out, re.M)
        return check_branch(m.group(1).decode("utf-8", "replace")) if m else None

    def check_branches(self, branches: Sequence[str]) -> dict[str, str]:
        heads = self.remote_heads()
        missing = [b for b in branches if b not in heads]
        if missing:
            known = ", ".join(sorted(heads)[:10]) or "none"
            raise GitBranchMissing(
                f"branch {', '.join(missing)} does not exist on {scrub(self.url)} (its branches: "
                f"{known}): push the branch first, or track one that exists"
            )
        return {b: heads[b] for b in branches}

    # ---- the bare clone

    def ensure(self) -> None:
        """The bare clone, made empty the first time (objects come with `fetch`; no hooks:
        the template is empty), and its attributes that keep an archive to the blobs' bytes
        (`git_export.ATTRIBUTES`), written again when a clone made before lacks them."""
        if not (self.path / "HEAD").exists():
            private_folder(self.path)
            self.git("init", "--bare", "--quiet", "--template=", str(self.path), bare=False)
        attributes = self.path / "info" / "attributes"
        if not attributes.is_file() or attributes.read_text() != ATTRIBUTES:
            private_folder(attributes.parent)
            attributes.write_text(ATTRIBUTES)
            os.chmod(attributes, git_export.FILE_MODE)

    def fetch(self, branches: Sequence[str]) -> dict[str, str]:
        """Fetch the branches (and tags); branch -> its commit now. No file git writes may
        pass the room the clone has left under FATHOM_GIT_MAX_FETCH_BYTES, and every object
        comes in one pack (never thousands of loose files). Git's housekeeping (repacking the
        packs fetches leave) runs after, outside that limit: under it, a repack of a clone
        bigger than the room left would die half-written."""
        remote = self.remote()
        self.ensure()
        room = self.limits.max_fetch_bytes - git_export.folder_bytes(self.path)
        if room <= 0:
            raise git_export.fetch_too_large(scrub(self.url), self.limits)
        specs = [f"+refs/heads/{b}:refs/remotes/origin/{b}" for b in branches]
        try:
            self.git(
                "-c",
                "fetch.unpackLimit=1",
                "-c",
                "transfer.unpackLimit=1",
                "-c",
                "maintenance.auto=false",
                "fetch",
                "--quiet",
                "--prune",
                "--no-write-fetch-head",
                "--",
                remote,
                *specs,
                "+refs/tags/*:refs/tags/*",
                remote=True,
                max_file_bytes=room,
            )
        except FathomError:
            if git_export.clear_partial_fetch(self.path, room):
                raise git_export.fetch_too_large(scrub(self.url), self.limits) from None
            raise
        with contextlib.suppress(FathomError):  # a failed repack leaves the packs as they were
            self.git("-c", "gc.autoDetach=false", "gc", "--auto", "--quiet")
        return {b: self.resolve(f"refs/remotes/origin/{b}") for b in branches}

    def resolve(self, ref: str) -> str:
        """The commit `ref` names in the clone (a fetched branch, a tag, a commit id)."""
        return (
            self.git("rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
            .decode()
            .strip()
        )

    def forget(self, branch: str) -> None:
        """Drop the fetched ref of a branch no longer tracked (already gone: nothing to do)."""
        if self.git("for-each-ref", f"refs/remotes/origin/{branch}").strip():
            self.git("update-ref", "-d", f"refs/remotes/origin/{branch}")

    def changes(self, old: str, new: str) -> list[Change]:
        """What differs between two commits, path by path (renames as a removal and an add)."""
        out = self.git("diff", "--name-status", "--no-renames", "-z", old, new, "--")
        return parse_changes(out, new)

    def plan(self, commit: str) -> Plan:
        """Every blob of `commit` with its size, and this clone's bounds (nothing written)."""
        out = self.git("ls-tree", "-r", "-l", "-z", "--full-tree", commit)
        return Plan.parse(out, commit, self.limits)

    def export(
        self, commit: str, folder: Path, paths: Sequence[str] | None = None, *, plan: Plan | None = None
    ) -> Exported:
        """Write the files of `commit` into `folder` (all of them, or only `paths`): how many
        were written, and the paths left out as larger than FATHOM_GIT_MAX_FILE_BYTES (never
        asked of git). A commit whose files pass FATHOM_GIT_MAX_TREE_BYTES is refused before
        anything is written. Paths pass tar's `data` filter: nothing lands outside the folder,
        no device files; a link leaving it is skipped (the repository's other files still
        come). Files are written 0600 and folders 0700, whatever the archive says."""
        plan = plan or self.plan(commit)
        plan.check(scrub(self.url))
        private_folder(folder)
        done = Exported(too_large=plan.too_large(paths))
        written_bytes = 0
        for part in plan.pathspecs(paths):
            args = ["archive", "--format=tar", commit] + (["--", *part] if part else [])
            # A stream (`r|`): each member is written as it arrives, in the archive's order.
            with self.streamed(*args) as out:
                written_bytes = git_export.write_archive(
                    out, folder, plan, done, remote=scrub(self.url), written_bytes=written_bytes
                )
        return done

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


class ChangedFiles(Discovery):
    """The walk of an incremental run driven by a git diff: the folder is listed as any walk
    lists it (its ignore rules hold; no file is opened), and only the files the diff named are
    read and chunked. The indexer's run of such a job (`Job.paths`) compares them with their
    own rows only, so the rest of the index stays as it is."""

    def __init__(self, root: Path, *, paths: Iterable[str], **options: Any):
        super().__init__(root, **options)
        self.paths = frozenset(paths)

    def survey(self) -> None:
        super().survey()
        listed = self._survey
        listed.candidates = [c for c in listed.candidates if c.rel in self.paths]
        self.bytes_total = listed.bytes


def diff_paths(changes: Sequence[Change]) -> list[str] | None:
    """The paths an incremental run must look at for `changes`, or None when only a whole walk
    will do (an ignore file changed, so which files are indexed may have changed anywhere)."""
    if any(c.path.rsplit("/", 1)[-1] in IGNORE_FILES for c in changes):
        return None
    return [c.path for c in changes]


def check_tree_path(path: str, commit: str) -> str:
    """`path` when it is a relative path of plain names (no empty, `.` or `..` part, no
    absolute path); GitTreeUnsafe naming `commit` otherwise."""
    parts = path.split("/")
    if not path or path.startswith("/") or "\\" in path or any(p in ("", ".", "..") for p in parts):
        raise GitTreeUnsafe(
            f"commit {commit[:40]} names the path {scrub(path)[:120]!r}, which "
            f"leaves the repository's folder: the remote's history is crafted or "
            f"damaged; nothing of it was written (remove the project, or fix the "
            f"remote)"
        )
    return path


def parse_changes(out: bytes, commit: str) -> list[Change]:
    """The changes `git diff --name-status -z` printed, each path checked (`check_tree_path`)."""
    fields = out.decode("utf-8", "surrogateescape").split("\0")
    return [
        Change(check_tree_path(path, commit), status == "D")
        for status, path in zip(fields[0::2], fields[1::2], strict=False)
        if status
    ]


def apply_changes(repo: GitRepo, commit: str, folder: Path, changes: Sequence[Change]) -> Exported:
    """Bring `folder` (the files of an older commit) to `commit`: write what changed, remove
    what is gone (and the older version of a file now too large to write), and prune folders
    left empty. Every path is checked to lie inside `folder`, and the commit against its
    bounds, before anything is removed or written."""
    root = folder.resolve()
    for c in changes:
        check_tree_path(c.path, commit)
        target = folder / c.path
        if not target.parent.resolve().is_relative_to(root):
            raise GitTreeUnsafe(
                f"commit {commit[:40]} names the path {scrub(c.path)[:120]!r}, "
                f"which leads outside {folder} through a link: nothing was removed"
            )
    plan = repo.plan(commit)
    plan.check(scrub(repo.url))
    too_large = set(plan.too_large(c.path for c in changes if not c.gone))
    for c in changes:
        target = folder / c.path
        if (c.gone or c.path in too_large) and (target.is_file() or target.is_symlink()):
            target.unlink()
            parent = target.parent.resolve()
            while (
                parent != root
                and parent.is_relative_to(root)
                and parent.is_dir()
                and not any(parent.iterdir())
            ):
                parent.rmdir()
                parent = parent.parent
    return repo.export(commit, folder, [c.path for c in changes if not c.gone], plan=plan)
