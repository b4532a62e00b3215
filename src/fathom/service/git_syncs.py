"""Git projects kept fresh: a forge's push webhook checked and answered at once, the sync it
asks for run after the answer, and the last outcome of every project's sync.

A forge gives a webhook delivery about ten seconds before it marks it failed, and re-indexing
a large push takes longer; so the webhook answers 202 as soon as the signature holds and the
pushed branch is tracked, and the sync runs here in the background.

What this module owns:

* The webhook's checks: the signature for the project's secret (GitHub, Gitea and GitLab
  shapes, compared in constant time) and the branch a push event names.
* `Syncs`: one background sync per project at a time. A push that arrives while its project
  syncs is kept and fetched by one more sync after that one (never lost, never two at once);
  pushes to several branches meanwhile make that one sync of all of them.
* The last outcome of each project's sync, whoever asked (a webhook, the poll loop or the
  operator): when, which branches, the result or the error, for the admin API.

What it refuses to do: run git or index (`GitProjects.sync` does both) or keep outcomes across
a restart. A push whose sync a restart cut short is not lost either: every sync brings each
branch from the commit its index holds to the remote's, so the next push, poll or
`fathom projects sync` catches up.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from fathom.errors import FathomError

log = logging.getLogger("fathom.service.git")

SyncRun = Callable[[str, Sequence[str] | None], Awaitable[dict[str, Any]]]


class WebhookRefused(FathomError):
    """A webhook call without a valid signature (or token) for the project: nothing is done."""


def signature_ok(secret: str, headers: Mapping[str, str], body: bytes) -> bool:
    """GitHub (`X-Hub-Signature-256: sha256=…`), Gitea (`X-Gitea-Signature: …`) or GitLab
    (`X-Gitlab-Token`, the secret itself), each compared in constant time."""
    h = {k.lower(): v for k, v in headers.items()}
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    if "x-hub-signature-256" in h:
        return hmac.compare_digest(h["x-hub-signature-256"].strip().encode(), f"sha256={digest}".encode())
    if "x-gitea-signature" in h:
        return hmac.compare_digest(h["x-gitea-signature"].strip().encode(), digest.encode())
    if "x-gitlab-token" in h:
        return hmac.compare_digest(h["x-gitlab-token"].encode(), secret.encode())
    return False


def pushed_branch(body: bytes) -> str | None:
    """The branch a push event names (`ref: refs/heads/B`, in all three payload shapes)."""
    try:
        ref = json.loads(body or b"{}").get("ref")
    except (ValueError, AttributeError):
        return None
    return ref.removeprefix("refs/heads/") if isinstance(ref, str) and ref.startswith("refs/heads/") else None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class Syncs:
    """Syncs run after their webhook's answer, one per project at a time, and the last outcome
    of every sync, whoever asked for it."""

    def __init__(self, run: SyncRun):
        self._run = run
        self._wanted: dict[str, set[str]] = {}
        self._runners: dict[str, asyncio.Task[None]] = {}
        self._running: dict[str, int] = {}  # syncs begun and not ended (webhook, poll, operator)
        self._last: dict[str, dict[str, Any]] = {}
        self._closed = False

    def request(self, project: str, branches: Iterable[str]) -> None:
        """Sync `branches` of `project` in the background: now, or right after the sync under
        way (once for every push that arrived meanwhile)."""
        self._wanted.setdefault(project, set()).update(branches)
        if self._closed:  # shutting down: the next start's poll, push or sync catches up
            return
        runner = self._runners.get(project)
        if runner is None or runner.done():
            self._runners[project] = asyncio.create_task(self._drain(project), name=f"git sync {project}")

    async def _drain(self, project: str) -> None:
        while wanted := self._wanted.pop(project, None):
            with contextlib.suppress(Exception):  # logged and kept as the outcome by `run`
                await self.run(project, sorted(wanted), "webhook")

    async def run(self, project: str, branches: Sequence[str] | None, trigger: str) -> dict[str, Any]:
        """Sync now (every tracked branch when `branches` is None), keeping the outcome; a
        failure is logged, kept and raised."""
        started = _now()
        self._running[project] = self._running.get(project, 0) + 1
        outcome: dict[str, Any] = {
            "trigger": trigger,
            "branches": list(branches) if branches else None,
            "started_at": started,
        }
        try:
            result = await self._run(project, branches)
        except asyncio.CancelledError:
            self._last[project] = outcome | {"finished_at": _now(), "error": "stopped by a shutdown"}
            raise
        except FathomError as exc:
            log.warning("git sync of %s (%s) failed: %s", project, trigger, exc)
            self._last[project] = outcome | {"finished_at": _now(), "error": str(exc)}
            raise
        except Exception as exc:
            log.exception("git sync of %s (%s) failed", project, trigger)
            self._last[project] = outcome | {
                "finished_at": _now(),
                "error": f"internal error ({type(exc).__name__}); see the server log",
            }
            raise
        finally:
            self._running[project] -= 1
            if not self._running[project]:
                del self._running[project]
        self._last[project] = outcome | {"finished_at": _now(), "result": result}
        return result

    def status(self, project: str) -> dict[str, Any]:
        """Whether a sync of `project` runs now (or waits for the one before it), the branches
        pushed since it began, and the last sync's outcome (None: none since this start)."""
        return {
            "project": project,
            "running": project in self._running,
            "queued": sorted(self._wanted.get(project, ())),
            "last": self._last.get(project),
        }

    def forget(self, project: str) -> None:
        self._last.pop(project, None)
        self._wanted.pop(project, None)

    async def aclose(self) -> None:
        """Stop the background syncs (a shutdown); each leaves the branches it had not finished
        serving their previous commit."""
        self._closed = True
        runners = [t for t in self._runners.values() if not t.done()]
        for task in runners:
            task.cancel()
        await asyncio.gather(*runners, return_exceptions=True)  # their ends, not raised here
        self._runners.clear()
