"""Model folders from the Hugging Face Hub's plain file API, checked and written atomically.

It owns talking to the Hub over `httpx`: the address (`HF_ENDPOINT`, default
https://huggingface.co), the listing of a model at a revision (`/api/models/{repo}/revision/
{revision}` for the commit, `/api/models/{repo}/tree/{commit}` for each file's size and
checksum), and fetching files (`/{repo}/resolve/{commit}/{file}`, following the Hub's redirect
to its CDN) into `<cache>/hub/<org>--<name>/<commit>/`. Every file is checked against a pin
before the folder exists: its size, and its sha256 (a weights file, as the Hub's LFS lists it,
or as `weights` pins the default's) or its git blob id (a small file). Files go into a
temporary folder beside the target, renamed into place only when all checked, under a file
lock: a crashed or concurrent download never leaves or reads half a model. A 5xx, a dropped
connection or a cut body is tried again (`ATTEMPTS`, waits injected); progress goes to a
`report` callable a line at a time (the CLI: stderr).

It refuses: `HF_HUB_OFFLINE` (the callers check `offline()` first and say what to do), an
`HF_ENDPOINT` over plain HTTP that is not this machine, a name that is not `org/name`, a file
that differs from its pin, a model without safetensors weights. It sends no token: a gated or
private model is refused with the way to use it (download it yourself, give its folder).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fathom.config import is_loopback
from fathom.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    import httpx

DEFAULT_ENDPOINT = "https://huggingface.co"
ATTEMPTS = 3  # per file; a 5xx, a dropped connection or a short body is tried again
CHUNK = 1 << 20
TRUTHY = {"1", "true", "yes", "on"}
HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}")
# What a model folder needs of a repository: its top-level files but other weight formats and
# the model card, and the folders its modules.json names (pooling, normalisation, dense).
OTHER_FORMATS = re.compile(
    r"(pytorch_model.*\.bin|tf_model\.h5|flax_model\.msgpack|rust_model\.ot|"
    r".*\.onnx|.*\.gguf|README\.md|\.gitattributes|.*\.(png|jpg|gif))$"
)
GIT_SHA1 = "git-sha1"


@dataclass(frozen=True)
class Pin:
    """What one file must be: its size and digest (`sha256`, or the git blob id `git-sha1`)."""

    size: int
    digest: str
    kind: str = "sha256"

    def hasher(self) -> Any:
        if self.kind == GIT_SHA1:  # git's blob id: sha1 over a header and the bytes
            h = hashlib.sha1(usedforsecurity=False)
            h.update(f"blob {self.size}\0".encode())
            return h
        return hashlib.sha256()


class HubDownloadError(ConfigError):
    """A model could not be downloaded from the Hub; nothing was written into the cache."""

    def __init__(self, repo: str, what: str, *, fix: str, url: str = ""):
        self.repo, self.what, self.url = repo, what, url
        where = f" from {url}" if url else ""
        super().__init__(
            f"cannot download {repo}{where}: {what}. Check the network (or "
            f"HF_ENDPOINT, a mirror of the Hub), or {fix}; nothing was written"
        )


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in TRUTHY


def stderr_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def endpoint(repo: str, fix: str) -> str:
    """The Hub's address (`HF_ENDPOINT`), refused over plain HTTP unless it is this machine."""
    import httpx  # here: choosing a model (`fathom models`) must stay a quick start

    raw = os.environ.get("HF_ENDPOINT", "").strip() or DEFAULT_ENDPOINT
    try:
        url = httpx.URL(raw)
    except httpx.InvalidURL:
        raise HubDownloadError(
            repo,
            "HF_ENDPOINT is not a URL; set it to https://huggingface.co "
            "or a mirror's https address, or unset it",
            fix=fix,
        ) from None
    shown = f"{url.scheme}://{url.host}{f':{url.port}' if url.port else ''}"  # never userinfo
    if url.scheme != "https" and not (url.scheme == "http" and is_loopback(url.host)):
        raise HubDownloadError(
            repo,
            f"HF_ENDPOINT={shown} is not https (plain http is only "
            f"accepted on this machine); set it to an https address",
            fix=fix,
        )
    return f"{shown}{url.path.rstrip('/')}"


def folder_of(cache: Path, repo: str, commit: str) -> Path:
    return cache / "hub" / repo.replace("/", "--") / commit


def complete(folder: Path, files: dict[str, Pin]) -> bool:
    """Every pinned file is there with its size (a cheap check: the digests were verified
    before the folder was renamed into place)."""
    try:
        return all((folder / name).stat().st_size == pin.size for name, pin in files.items())
    except OSError:
        return False


def _client() -> httpx.Client:
    import httpx

    return httpx.Client(timeout=httpx.Timeout(30.0, connect=10.0), follow_redirects=True)


def fetch_folder(
    repo: str,
    commit: str,
    files: dict[str, Pin],
    target: Path,
    *,
    fix: str,
    report: Callable[[str], None] = stderr_line,
    client: httpx.Client | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Path:
    """Download `files` of `repo` at `commit` into `target`, each checked against its pin, and
    return it (another process's download, done while this one waited, is taken as it is)."""
    from filelock import FileLock

    base = f"{endpoint(repo, fix)}/{repo}/resolve/{commit}"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot create the model cache {target.parent}: {exc.strerror}. Set "
            f"FATHOM_MODEL_CACHE to a writable folder"
        ) from None
    with FileLock(str(target) + ".lock"):
        if complete(target, files):
            return target
        shutil.rmtree(target, ignore_errors=True)  # a file deleted or cut by hand: all fetched again
        total = sum(pin.size for pin in files.values())
        report(
            f"downloading {repo} ({len(files)} files, {total / 1e6:.1f} MB) from "
            f"{base.split('/' + repo)[0]} into {target}, once"
        )
        started = clock()
        partial = Path(tempfile.mkdtemp(dir=target.parent, prefix=".partial-"))
        http = client or _client()
        try:
            meter = _Meter(max(total, 1), report)
            # Small files first: a wrong name or a refused model fails before the weights.
            for name, pin in sorted(files.items(), key=lambda item: item[1].size):
                dest = partial / name
                if not safe_name(name) or not dest.resolve().is_relative_to(partial.resolve()):
                    raise HubDownloadError(repo, f"{name!r} is not a file of the model's folder", fix=fix)
                _fetch(http, repo, f"{base}/{name}", dest, pin, meter, sleep, fix)
            os.replace(partial, target)
        finally:
            if client is None:
                http.close()
            shutil.rmtree(partial, ignore_errors=True)
        report(f"downloaded {repo} and checked each file's checksum in {clock() - started:.1f} s")
    return target


def hub_model(
    repo: str,
    cache: Path,
    *,
    revision: str = "main",
    report: Callable[[str], None] = stderr_line,
    client: httpx.Client | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Path:
    """The folder of the Hub model `repo` at `revision`, downloaded into the cache unless it
    is there: the commit `revision` is now, and each file's size and checksum, as the Hub
    lists them."""
    fix = "download the model yourself and give its folder's path"
    if not HUB_NAME.fullmatch(repo):
        raise ConfigError(
            f"{repo!r} is not a Hub model name (ORG/NAME, e.g. BAAI/bge-small-en-v1.5) nor a model folder"
        )
    if offline():
        raise ConfigError(
            f"{repo} is not on this machine, and HF_HUB_OFFLINE is set, so it is "
            f"not downloaded: unset HF_HUB_OFFLINE, or {fix}"
        )
    http = client or _client()
    try:
        commit, files = listing(http, repo, revision, fix)
        return fetch_folder(
            repo,
            commit,
            files,
            folder_of(cache, repo, commit),
            fix=fix,
            report=report,
            client=http,
            sleep=sleep,
        )
    finally:
        if client is None:
            http.close()


def listing(http: httpx.Client, repo: str, revision: str, fix: str) -> tuple[str, dict[str, Pin]]:
    """(commit, the files a model folder needs with their pins) of `repo` at `revision`."""
    base = f"{endpoint(repo, fix)}/api/models/{repo}"
    commit = str(_json(http, f"{base}/revision/{revision}", repo, fix).get("sha") or "")
    if not re.fullmatch(r"[0-9a-f]{40}", commit):
        raise HubDownloadError(repo, f"the Hub named no commit for revision {revision!r}", fix=fix)
    entries = _json(http, f"{base}/tree/{commit}?recursive=true", repo, fix)
    listed = {str(e["path"]): e for e in entries if isinstance(e, dict) and e.get("type") == "file"}
    unsafe = sorted(p for p in listed if not safe_name(p))
    if unsafe:  # a mirror's listing is not trusted to name only files inside the model's folder
        raise HubDownloadError(
            repo, f"the listing names a file outside the model's folder ({unsafe[0]!r})", fix=fix
        )
    modules = [m.get("path") for m in _json_file(http, repo, commit, listed, fix) if isinstance(m, dict)]
    wanted = {
        p
        for p in listed
        if ("/" not in p and not OTHER_FORMATS.fullmatch(p))
        or any(m and p.startswith(f"{m}/") for m in modules)
    }
    if not {"config.json", "model.safetensors"} <= wanted:
        raise HubDownloadError(
            repo,
            "it has no config.json beside model.safetensors (weights in another format are not loaded)",
            fix=fix,
        )
    pins = {}
    for path in sorted(wanted):
        entry, lfs = listed[path], listed[path].get("lfs")
        pins[path] = (
            Pin(int(lfs["size"]), str(lfs["oid"]))
            if isinstance(lfs, dict)
            else Pin(int(entry["size"]), str(entry["oid"]), GIT_SHA1)
        )
    return commit, pins


def _json(http: httpx.Client, url: str, repo: str, fix: str) -> Any:
    import httpx

    try:
        response = http.get(url)
    except httpx.HTTPError as exc:
        raise HubDownloadError(repo, type(exc).__name__, fix=fix, url=url) from None
    if response.status_code in (401, 403, 404):
        # The Hub answers 401 for a name it does not have as for a private or gated one.
        raise HubDownloadError(
            repo,
            f"HTTP {response.status_code}: no public model of that name "
            f"(a private or gated one needs a token, which Fathom does "
            f"not send)",
            fix=fix,
            url=url,
        )
    if response.status_code != 200:
        raise HubDownloadError(repo, f"HTTP {response.status_code}", fix=fix, url=url)
    try:
        return response.json()
    except ValueError:
        raise HubDownloadError(repo, "the Hub's answer is not JSON", fix=fix, url=url) from None


def _json_file(http: httpx.Client, repo: str, commit: str, listed: dict[str, Any], fix: str) -> list[Any]:
    """`modules.json` of the commit (which folders the pipeline reads), or [] without one."""
    if "modules.json" not in listed:
        return []
    value = _json(http, f"{endpoint(repo, fix)}/{repo}/resolve/{commit}/modules.json", repo, fix)
    return value if isinstance(value, list) else []


class _Meter:
    """Turns bytes received into a progress line at each tenth of the whole download."""

    def __init__(self, total: int, report: Callable[[str], None]):
        self.total, self.report, self.done, self.shown = total, report, 0, 0

    def add(self, n: int) -> None:
        self.done += n
        tenth = self.done * 10 // self.total
        if tenth > self.shown:
            self.shown = tenth
            self.report(f"  {tenth * 10:3d}%  {self.done / 1e6:6.1f} / {self.total / 1e6:.1f} MB")

    def undo(self, n: int) -> None:
        self.done -= n  # a failed attempt's bytes are received again


def safe_name(name: str) -> bool:
    """Whether a listed file name stays inside the folder it is written to: relative, POSIX,
    no `..`, no empty or `.` part."""
    parts = name.split("/")
    return (
        bool(name)
        and "\\" not in name
        and not name.startswith("/")
        and all(part not in ("", ".", "..") for part in parts)
    )


def _fetch(
    http: httpx.Client,
    repo: str,
    url: str,
    dest: Path,
    pin: Pin,
    meter: _Meter,
    sleep: Callable[[float], None],
    fix: str,
) -> None:
    """One pinned file into `dest`, tried `ATTEMPTS` times when the failure may pass."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, ATTEMPTS + 1):
        try:
            digest = _stream(http, repo, url, dest, pin, meter, fix)
        except _Transient as exc:
            meter.undo(exc.received)
            if attempt == ATTEMPTS:
                raise HubDownloadError(repo, f"{exc.what}, {ATTEMPTS} times", fix=fix, url=url) from None
            sleep(float(attempt))
            continue
        if digest != pin.digest:
            raise HubDownloadError(
                repo,
                f"{dest.name} has {pin.kind} {digest}, not the pinned "
                f"{pin.digest} (a proxy or mirror changed it)",
                fix=fix,
                url=url,
            )
        return


class _Transient(Exception):
    def __init__(self, what: str, received: int):
        super().__init__(what)
        self.what, self.received = what, received


def _stream(http: httpx.Client, repo: str, url: str, dest: Path, pin: Pin, meter: _Meter, fix: str) -> str:
    """The digest of the body written to `dest`; no more than the pinned size is read."""
    import httpx

    h, got = pin.hasher(), 0
    try:
        with http.stream("GET", url) as response:
            if response.status_code >= 500 or response.status_code == 429:
                raise _Transient(f"HTTP {response.status_code}", 0)
            if response.status_code != 200:
                raise HubDownloadError(repo, f"HTTP {response.status_code} for {dest.name}", fix=fix, url=url)
            with dest.open("wb") as out:
                for chunk in response.iter_bytes(CHUNK):
                    if got + len(chunk) > pin.size:
                        raise HubDownloadError(
                            repo, f"{dest.name} is larger than its pinned {pin.size} bytes", fix=fix, url=url
                        )
                    out.write(chunk)
                    h.update(chunk)
                    got += len(chunk)
                    meter.add(len(chunk))
                out.flush()
                os.fsync(out.fileno())
    except OSError as exc:  # the disk, not the network: trying again would not help
        raise ConfigError(
            f"cannot write {dest.name} into the model cache: {exc.strerror}. Set "
            f"FATHOM_MODEL_CACHE to a writable folder with room for the model"
        ) from None
    except httpx.HTTPError as exc:
        raise _Transient(f"{type(exc).__name__} after {got} bytes", got) from None
    if got != pin.size:
        raise _Transient(f"{dest.name} ended after {got} of {pin.size} bytes", got)
    return str(h.hexdigest())
