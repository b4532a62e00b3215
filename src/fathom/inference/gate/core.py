"""The gate: who may write rows into a vector space, and which routes must be pinned.

It owns the decision and its lifecycle: the decision itself is the `Judge`'s (`judge`: pick
the reference the policy calls for, embed the probe set through candidate and reference, turn
the comparison into a `Verdict`, record golden vectors the first time a space's reference
answers); the gate persists it, tracks who is cleared, re-probes cleared providers
(periodically, after each reconnect, and after a restart: the watch list of cleared providers
is persisted beside the verdicts), and quarantines one at once when it drifts. A refused or
quarantined verdict revokes every earlier cleared verdict of the same provider (id, model and
pin) in the same space, so the audit sees the rows written since the last good check whichever path found the
drift. A re-probe that cannot run yet (the provider is unreachable, or its key is missing) is
deferred, never dropped: the provider stays uncleared until it runs and passes.

It refuses to route, to batch index work, or to write rows: the pool asks `is_cleared` before
a provider pulls work, and the store asks `GateClearance` before it writes a row. It never
talks to a network or a model except through `Provider.embed`, so any provider (in-process,
sidecar, OpenRouter, a test fake) is judged the same way. It is never disabled: a space whose
reference cannot answer gets no verdict (`GateUnavailable`), not a pass.

`GateClearance`, the store's second lock, is here too: a row lands only under a cleared, current
gate verdict. It is the `fathom.space.Clearance` the store asks before every write and every
re-embedding. It refuses a provenance whose verdict is missing, belongs to another provider or
another vector space, was refused, was revoked by a quarantine, or has been superseded by a
newer verdict for the same provider (its model or pin changed). It refuses to probe or decide
anything itself: it only reads what the gate has decided.
"""

from __future__ import annotations

import asyncio
import inspect as _inspect
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fathom.errors import ConfigError, FathomError, NotCleared, PinRequired, ProviderError

# GateUnavailable: raised by the judge, still importable from here as it always was.
from fathom.inference.gate.judge import GateUnavailable as GateUnavailable
from fathom.inference.gate.judge import Golden, GoldenStore, GoldenVectors, Judge, identity, role_for
from fathom.inference.gate.verdict import (
    MIN_COSINE,
    Coverage,
    Evidence,
    JsonVerdictStore,
    Verdict,
    VerdictStore,
    Watched,
    inspect,
)
from fathom.inference.probes import ProbeSet, load_probes
from fathom.inference.provider import Provider
from fathom.policy import BEHAVIOUR, Policy, Reference
from fathom.roles import EMBEDDING_ROLES, Role
from fathom.space import Provenance, Space

log = logging.getLogger(__name__)

# Re-probe every cleared provider this often by default. Drift behind a pin is a redeploy, not
# a per-request event; an hour bounds how many rows a drifted provider can write unnoticed
# without spending noticeable cloud budget on probes.
DEFAULT_RECHECK_INTERVAL_S = 3600.0


class GateRefused(FathomError):
    """A provider failed the gate: it must not serve a single text for this table."""

    def __init__(self, verdict: Verdict):
        self.verdict = verdict
        self.provider_id = verdict.key.provider_id
        self.cosines = dict(verdict.cosines)
        self.min_cosine = verdict.min_cosine
        k = verdict.key
        ref = k.reference.split("|")[0]
        super().__init__(
            f"gate refused {k.provider_id} for the {k.table} table ({k.regime.value} against "
            f"{ref}): {verdict.reason}. Its vectors are not interchangeable with the table's; "
            f"serve this table from the reference stack, or build a new index from this encoder."
        )


@dataclass(frozen=True)
class GateEvent:
    """What listeners hear: a provider cleared, refused, or quarantined for a space."""

    kind: str  # "cleared" | "refused" | "quarantined"
    space: Space
    provider_id: str
    verdict: Verdict


Listener = Callable[[GateEvent], "Awaitable[None] | None"]


def check_pin(role: Role | str, provider: Provider) -> None:
    """Fail closed: a cloud route for an embedding role must name its upstream. Reranking
    (and chat) write nothing, so they need none."""
    role = Role.parse(role)
    if role in EMBEDDING_ROLES and provider.info.is_cloud and not provider.info.upstream:
        raise PinRequired(role.value, provider.info.model)


def choose_anchor(providers: Iterable[Provider], model: str, role: Role | str) -> str | None:
    """The deterministic cloud anchor for a `cloud` space of `model`: the smallest id among
    the pinned cloud providers serving it. Every server picks the same one from the same
    fleet, so two restarts never judge against two different peers."""
    role = Role.parse(role)
    ids = sorted(
        p.id
        for p in providers
        if p.info.is_cloud and p.info.model == model and p.info.upstream and role in p.info.roles
    )
    return ids[0] if ids else None


class Gate:
    """Judges providers per vector space and keeps the verdicts.

    `data_dir` holds `gate/verdicts.json` and `gate/golden/`; pass `verdicts=` / `golden=` to
    put them elsewhere (a PostgreSQL `VerdictStore`). `now` is the wall clock used for verdict
    times (persisted, compared with rows' `written_at`); `clock` (anything with an async
    `sleep`) drives the periodic re-probe loop.
    """

    def __init__(
        self,
        data_dir: Path | str | None = None,
        *,
        verdicts: VerdictStore | None = None,
        golden: GoldenVectors | None = None,
        probes: ProbeSet | None = None,
        now: Callable[[], float] = time.time,
        clock: Any = None,
        threshold: float = MIN_COSINE,
        recheck_interval_s: float = DEFAULT_RECHECK_INTERVAL_S,
    ):
        if verdicts is None or golden is None:
            if data_dir is None:
                raise ConfigError("Gate needs a data dir (or both a verdict store and a golden store)")
            base = Path(data_dir) / "gate"
            verdicts = verdicts or JsonVerdictStore(base / "verdicts.json")
            golden = golden or GoldenStore(base / "golden")
        self.verdicts: VerdictStore = verdicts
        self.golden: GoldenVectors = golden
        self.probes = probes or load_probes()
        self._now = now
        self._clock = clock
        self.threshold = threshold
        self.recheck_interval_s = recheck_interval_s
        self._providers: dict[str, Provider] = {}
        self._tracked: dict[tuple[str, str], Space] = {}  # (space key, provider id) -> space
        self._restored = False  # whether the persisted watch list has been read (lazily)
        self._regime: dict[str, Reference] = {}  # space key -> regime last verified under
        self._listeners: list[Listener] = []
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        # Provider ids not cleared until a re-probe passes: after a reconnect, after a restart,
        # or because their last re-probe could not run (deferred, never dropped).
        self._pending: set[str] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._reprobing: dict[str, asyncio.Task[Any]] = {}  # provider id -> its running re-probe
        self._judge = Judge(
            probes=self.probes,
            golden=self.golden,
            verdicts=self.verdicts,
            providers=self._providers,
            threshold=threshold,
            now=now,
            is_cleared=self.is_cleared,
            quarantine_if_cleared=self._quarantine_if_cleared,
        )

    # -- the watch list: who is cleared, and when each was last checked (persisted) -------

    def _restore(self) -> None:
        """Read the persisted watch list once (lazily: a PostgreSQL store connects on first
        use). Every provider cleared before this process started is watched again and pending:
        the stack behind the same id may have changed while nobody was looking."""
        if self._restored:
            return
        self._restored = True
        for w in self.verdicts.watched():
            self._tracked.setdefault((w.space.key, w.provider_id), w.space)
            self._pending.add(w.provider_id)

    def _track(self, space: Space, provider_id: str, checked_at: float | None) -> None:
        self._tracked[(space.key, provider_id)] = space
        self.verdicts.watch(Watched(space, provider_id, checked_at))

    def _untrack(self, space: Space, provider_id: str) -> None:
        self._tracked.pop((space.key, provider_id), None)
        self.verdicts.unwatch(space.key, provider_id)

    def awaiting_reprobe(self, provider: Provider | str) -> bool:
        """Whether the provider holds a cleared verdict that does not count until a re-probe
        passes (reconnect, restart, or a deferred re-probe)."""
        self._restore()
        return (provider if isinstance(provider, str) else provider.id) in self._pending

    # -- the live fleet the gate may take references from ------------------------------

    def attach(self, provider: Provider) -> None:
        """A provider is live: it may serve as a reference or a cloud peer. A reconnecting
        provider replaces its previous object (same id)."""
        self._providers[provider.id] = provider

    def detach(self, provider: Provider | str) -> None:
        self._providers.pop(provider if isinstance(provider, str) else provider.id, None)

    @property
    def providers(self) -> list[Provider]:
        return list(self._providers.values())

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Call `listener(event)` (sync or async) on every clear, refusal and quarantine.
        Returns a function that removes it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    # -- questions the router, the pool and the store ask ------------------------------

    def verdict_for(self, space: Space, provider: Provider) -> Verdict | None:
        """The latest verdict for this provider in this space, as it is now (model, pin,
        width); None when it was never judged, or its model or pin changed since."""
        i = provider.info
        regime = self._regime.get(space.key)
        found = [
            v
            for v in self.verdicts.all()
            if v.key.matches(
                space=space.key, provider_id=i.id, model=i.model, upstream=i.upstream, width=space.width
            )
            and (regime is None or v.key.regime is regime)
        ]
        return found[-1] if found else None

    def is_cleared(self, space: Space, provider: Provider) -> bool:
        """A cleared, unrevoked verdict for the provider as it is now, and no re-probe after
        a reconnect or a restart still pending (the stack may not be the one that was judged)."""
        if self.awaiting_reprobe(provider):
            return False
        v = self.verdict_for(space, provider)
        return v is not None and v.cleared

    def for_router(self, space_of: Callable[[Role], Space | None]) -> Callable[[Role, Provider], bool]:
        """The router's `is_cleared(role, provider)`: an embedding role needs a cleared verdict
        for the role's current space (`space_of(role)`, None while the table has none: nothing
        is cleared); stateless roles write nothing and are not gated."""

        def is_cleared(role: Role, provider: Provider) -> bool:
            role = Role.parse(role)
            if role not in EMBEDDING_ROLES:
                return True
            space = space_of(role)
            return space is not None and self.is_cleared(space, provider)

        return is_cleared

    def bind(self, registry: Any) -> Callable[[], None]:
        """Keep step with a `ProviderRegistry`: providers it adds are attached (and, when they
        held a cleared verdict, re-probed as a reconnect before they count as cleared again),
        providers it removes are detached; a quarantine here quarantines the provider there
        (it stops pulling), and a new clearance restores or touches it. Returns an unbind."""

        def on_change(change: Any) -> None:
            kind, provider = str(getattr(change.kind, "value", change.kind)), change.provider
            self._restore()
            if kind == "added":
                self.attach(provider)
                if self._watched(provider.id):
                    self._pending.add(provider.id)  # not cleared until the re-probe says so
                    self._spawn_reprobe(provider, again=True)
            elif kind == "removed":
                self.detach(provider)
            elif kind == "health" and provider.id in self._pending and registry.available(provider.id):
                # A deferred re-probe can run now (e.g. the key was pushed again).
                self._spawn_reprobe(provider, again=False)

        def on_verdict(event: GateEvent) -> None:
            if event.kind == "quarantined":
                registry.quarantine(event.provider_id, f"gate: {event.verdict.revoked_reason}")
            elif event.kind == "cleared":
                health = registry.health(event.provider_id)
                if str(getattr(health.state, "value", health.state)) == "quarantined":
                    registry.restore(event.provider_id)
                else:
                    registry.touch(event.provider_id)

        for p in list(registry):
            self.attach(p)
        unsubscribe = registry.subscribe(on_change)
        remove = self.add_listener(on_verdict)

        def unbind() -> None:
            unsubscribe()
            remove()

        return unbind

    def _watched(self, provider_id: str) -> bool:
        return any(pid == provider_id for _, pid in self._tracked)

    def _spawn_reprobe(self, provider: Provider, *, again: bool) -> None:
        """Start `on_reconnect(provider)` in the background. `again`: a new connection, whose
        re-probe must run even while one for its previous connection is still out."""
        running = self._reprobing.get(provider.id)
        if running is not None and not running.done() and not again:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a synchronous caller): it stays pending; `verify` re-probes
            return
        task = loop.create_task(self.on_reconnect(provider))
        self._reprobing[provider.id] = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def resume(self) -> None:
        """Start the re-probe of every attached provider still pending (a server start: the
        providers cleared before the restart, the in-process encoder among them)."""
        self._restore()
        for pid in sorted(self._pending):
            provider = self._providers.get(pid)
            if provider is not None and self._watched(pid):
                self._spawn_reprobe(provider, again=False)

    def verdict_by_id(self, verdict_id: str | None) -> Verdict | None:
        return self.verdicts.get(verdict_id) if verdict_id else None

    def latest_verdict(self, space_key: str, provider_id: str) -> Verdict | None:
        """The newest verdict for a provider id in a space, whatever its model or pin: a
        verdict superseded by a newer decision no longer clears rows."""
        found = [
            v for v in self.verdicts.all() if v.key.space == space_key and v.key.provider_id == provider_id
        ]
        return found[-1] if found else None

    def status_lines(self, space: Space | None = None) -> list[str]:
        """Plain-words status of the latest verdict per (space, provider)."""
        latest: dict[tuple[str, str, str, str | None], Verdict] = {}
        for v in self.verdicts.all():
            if space is not None and v.key.space != space.key:
                continue
            latest[(v.key.space, v.key.provider_id, v.key.model, v.key.upstream)] = v
        return [v.status_line() for v in latest.values()]

    def golden_for(self, space: Space) -> Golden | None:
        return self._judge.golden_for(space)

    # -- the check -----------------------------------------------------------------------

    async def verify(
        self,
        space: Space,
        provider: Provider,
        policy: Policy | str,
        *,
        peers: Sequence[Provider] = (),
        force: bool = False,
    ) -> Verdict:
        """Judge `provider` for `space` under `policy` and persist the verdict.

        Raises `PinRequired` before any probe for an unpinned cloud embedding route, and
        `GateUnavailable` when no reference can answer. Otherwise returns the verdict, passed
        or refused (`Verdict.cleared`; `raise_if_refused` turns a refusal into `GateRefused`).
        An existing verdict for the same key is returned as is unless `force`.
        """
        policy = Policy.parse(policy)
        check_pin(role_for(space), provider)  # the pin first: not one request before it passes
        for p in (provider, *peers):
            self.attach(p)
        regime = BEHAVIOUR[policy].reference
        self._regime[space.key] = regime
        self._restore()
        lock = self._locks.setdefault((space.key, provider.id), asyncio.Lock())
        async with lock:
            existing = self.verdict_for(space, provider)
            if existing is not None and not force:
                if not existing.cleared:
                    return existing
                if (space.key, provider.id) not in self._tracked:
                    self._track(space, provider.id, existing.last_good_check)
                if provider.id not in self._pending:
                    return existing
                verdict = None  # cleared before a reconnect or restart: re-probe it first
            else:
                verdict = await self._judge.decide(space, provider, regime)
                self.verdicts.put(verdict)
                if verdict.cleared:
                    self._track(space, provider.id, verdict.decided_at)
                else:
                    self._revoke_earlier(
                        space,
                        verdict,
                        f"superseded by refused verdict {verdict.verdict_id}: {verdict.reason}",
                        verdict.evidence,
                    )
                    self._untrack(space, provider.id)
        if verdict is None:
            await self.on_reconnect(provider)
            return self.verdict_for(space, provider)  # type: ignore[return-value]  # judged just now
        log.info("gate: %s", verdict.status_line())
        await self._emit(GateEvent("cleared" if verdict.cleared else "refused", space, provider.id, verdict))
        return verdict

    async def admit(self, space: Space, provider: Provider, policy: Policy | str, **kw: Any) -> Verdict:
        """`verify`, raising `GateRefused` (with the per-probe cosines) when refused."""
        return raise_if_refused(await self.verify(space, provider, policy, **kw))

    # -- re-probes and quarantine --------------------------------------------------------

    async def recheck(self, space: Space, provider: Provider) -> Verdict | None:
        """`_recheck`, answering the verdict unchanged when the re-probe was deferred."""
        try:
            return await self._recheck(space, provider)
        except _Deferred:
            return self.verdict_for(space, provider)

    async def _recheck(self, space: Space, provider: Provider) -> Verdict | None:
        """Re-probe one cleared provider against the golden vectors and, when its verdict
        named a live reference that still agrees with them, against that reference too. A
        failure quarantines it at once. An unreachable provider is not judged (returns its
        verdict unchanged) but becomes pending, and `_Deferred` is raised: the re-probe waits
        until it can run (a reconnect, the key pushed again, the next round, the next index
        job's check)."""
        verdict = self.verdict_for(space, provider)
        if verdict is None or not verdict.cleared:
            return verdict
        ids, width = self.probes.ids, space.width
        golden = self.golden_for(space)
        try:
            vectors = await provider.embed(self.probes.texts)
        except ProviderError as exc:
            self._pending.add(provider.id)
            log.warning(
                "gate: re-probe of %s deferred, it cannot answer now (%s); it stays "
                "uncleared until the re-probe runs",
                provider.id,
                type(exc).__name__,
            )
            raise _Deferred from exc
        evidence = inspect(
            ids, vectors, width, reference=golden.vectors if golden else None, threshold=self.threshold
        )
        if not evidence.passed:
            what = "the golden vectors" if golden and evidence.shape_ok else "the shape check"
            return await self._quarantine(
                space, verdict, f"re-probe against {what}: {evidence.reason()}", evidence
            )
        if golden is None and verdict.coverage in (Coverage.SELF, Coverage.REDUCED):
            self._judge.record_golden(space, provider, vectors)
        ref = self._live_reference(verdict)
        if ref is not None:
            try:
                ref_vectors = await ref.embed(self.probes.texts)
            except ProviderError:
                ref_vectors = None
            if ref_vectors is not None:
                own = inspect(
                    ids,
                    ref_vectors,
                    width,
                    reference=golden.vectors if golden else None,
                    threshold=self.threshold,
                )
                if own.passed:  # a drifted reference is quarantined by its own re-probe, not used
                    versus = inspect(ids, vectors, width, reference=ref_vectors, threshold=self.threshold)
                    if not versus.passed:
                        return await self._quarantine(
                            space, verdict, f"re-probe against {ref.id}: {versus.reason()}", versus
                        )
        updated = verdict.checked_ok(self._now())
        self.verdicts.put(updated)
        self._track(space, provider.id, updated.last_good_check)
        return updated

    def _live_reference(self, verdict: Verdict) -> Provider | None:
        if verdict.coverage is not Coverage.FULL:
            return None
        ref = self._providers.get(verdict.key.reference.split("|")[0])
        if ref is None or identity(ref) != verdict.key.reference:
            return None
        return ref

    async def recheck_all(self) -> list[Verdict]:
        """Re-probe every watched provider that is attached; returns their verdicts after the
        re-probe (quarantined ones included)."""
        self._restore()
        out: list[Verdict] = []
        for pid in sorted({pid for _, pid in self._tracked}):
            provider = self._providers.get(pid)
            if provider is not None:
                out.extend(await self._reprobe(provider))
        return out

    async def on_reconnect(self, provider: Provider) -> list[Verdict]:
        """A provider came back (sidecar reconnect, new connection, a server restart): re-probe
        it for every space it is cleared for before it pulls again."""
        self._restore()
        self.attach(provider)
        self._pending.add(provider.id)
        return await self._reprobe(provider)

    async def _reprobe(self, provider: Provider) -> list[Verdict]:
        """Re-probe `provider` in every space it is watched in. It stops being pending only
        when every one of them ran; one that could not run keeps it pending (deferred)."""
        out: list[Verdict] = []
        ran_all = True
        for (_, pid), space in list(self._tracked.items()):
            if pid != provider.id:
                continue
            try:
                v = await self._recheck(space, provider)
            except _Deferred:
                ran_all = False
                continue
            if v is not None:
                out.append(v)
        if ran_all:
            self._pending.discard(provider.id)
        return out

    async def drain(self) -> None:
        """Wait for the re-probes that registry reconnects started (shutdown, tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def run_rechecks(
        self, interval_s: float | None = None, *, stop: asyncio.Event | None = None, rounds: int | None = None
    ) -> None:
        """Re-probe everything every `interval_s` on the injected clock, until `stop` is set
        or `rounds` rounds have run. A round that fails unexpectedly is logged, not fatal:
        the loop is the only thing watching for drift."""
        interval = self.recheck_interval_s if interval_s is None else interval_s
        sleep = self._clock.sleep if self._clock is not None else asyncio.sleep
        done = 0
        while (stop is None or not stop.is_set()) and (rounds is None or done < rounds):
            await sleep(interval)
            if stop is not None and stop.is_set():
                break
            try:
                await self.recheck_all()
            except Exception:  # keep watching; the failure is logged with its trace
                log.exception("gate: re-probe round failed")
            done += 1

    def start_rechecks(
        self, interval_s: float | None = None, *, stop: asyncio.Event | None = None
    ) -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(
            self.run_rechecks(interval_s, stop=stop), name="gate.rechecks"
        )

    async def quarantine(self, space: Space, provider: Provider | str, reason: str) -> Verdict | None:
        """Revoke a provider's cleared verdict by hand (an operator's call)."""
        pid = provider if isinstance(provider, str) else provider.id
        prov = self._providers.get(pid) if isinstance(provider, str) else provider
        verdict = self.verdict_for(space, prov) if prov is not None else None
        if verdict is None or not verdict.cleared:
            return verdict
        return await self._quarantine(space, verdict, reason, None)

    async def _quarantine_if_cleared(
        self, space: Space, provider: Provider, reason: str, evidence: Evidence
    ) -> None:
        verdict = self.verdict_for(space, provider)
        if verdict is not None and verdict.cleared:
            await self._quarantine(space, verdict, reason, evidence)

    async def _quarantine(
        self, space: Space, verdict: Verdict, reason: str, evidence: Evidence | None
    ) -> Verdict:
        revoked = verdict.revoked(self._now(), reason, evidence)
        self.verdicts.put(revoked)
        self._revoke_earlier(
            space, verdict, f"superseded by quarantined verdict {verdict.verdict_id}: {reason}", evidence
        )
        self._untrack(space, verdict.key.provider_id)
        log.warning(
            "gate: QUARANTINED %s for the %s table: %s (last good check %s)",
            verdict.key.provider_id,
            space.table,
            reason,
            verdict.last_good_check,
        )
        await self._emit(GateEvent("quarantined", space, verdict.key.provider_id, revoked))
        return revoked

    def _revoke_earlier(self, space: Space, decided: Verdict, reason: str, evidence: Evidence | None) -> None:
        """Revoke every other cleared verdict of the provider `decided` judged, in its space:
        the same id, model and pin (a provider's identity; a re-pinned route is another
        provider, whose refusal says nothing of the rows the old pin wrote). A refusal or a
        quarantine makes its rows since their last good check suspect, and the audit lists the
        rows of revoked verdicts."""
        k = decided.key
        for v in self.verdicts.all():
            if (
                v.key.space == space.key
                and v.key.provider_id == k.provider_id
                and (v.key.model, v.key.upstream) == (k.model, k.upstream)
                and v.verdict_id != decided.verdict_id
                and v.cleared
            ):
                self.verdicts.put(v.revoked(self._now(), reason, evidence))
                log.warning(
                    "gate: revoked %s of %s for the %s table: %s",
                    v.verdict_id,
                    k.provider_id,
                    space.table,
                    reason,
                )

    async def _emit(self, event: GateEvent) -> None:
        for listener in list(self._listeners):
            try:
                result = listener(event)
                if _inspect.isawaitable(result):
                    await result
            except Exception:  # one broken listener must not stop a quarantine
                log.exception("gate: listener failed on %s", event.kind)


class _Deferred(Exception):
    """A re-probe that could not run now (its provider cannot answer): deferred, not dropped."""


def raise_if_refused(verdict: Verdict) -> Verdict:
    if not verdict.cleared:
        raise GateRefused(verdict)
    return verdict


# -- the store's second lock -----------------------------------------------------------


class GateClearance:
    def __init__(self, gate: Gate):
        self.gate = gate

    def check(self, space: Space, provenance: Provenance) -> None:
        pid, vid = provenance.provider_id, provenance.verdict_id

        def refuse(reason: str) -> NotCleared:
            return NotCleared(space.table, pid, vid, reason=reason)

        if not vid:
            raise refuse("the rows carry no gate verdict")
        verdict = self.gate.verdict_by_id(vid)
        if verdict is None:
            raise refuse(f"verdict {vid} is unknown to the gate")
        k = verdict.key
        if k.provider_id != pid:
            raise refuse(f"verdict {vid} was issued to {k.provider_id}, not to {pid}")
        if k.space != space.key or k.width != space.width:
            raise refuse(
                f"verdict {vid} clears {k.table} space {k.space} (width {k.width}), "
                f"not this table's space {space.key} (width {space.width})"
            )
        if not verdict.passed:
            raise refuse(f"the gate refused it: {verdict.reason}")
        if verdict.revoked_at is not None:
            raise refuse(f"quarantined: {verdict.revoked_reason}")
        latest = self.gate.latest_verdict(space.key, pid)
        if latest is not None and latest.verdict_id != vid:
            raise refuse(
                f"verdict {vid} is superseded by {latest.verdict_id} "
                f"({latest.status.value}); the provider's model or pin changed"
            )
