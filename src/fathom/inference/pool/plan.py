"""What a lane does next: exit, wait (until when), pull (how many), or duplicate a straggler.

`Planner.next` reads the job state and decides; it changes nothing. The end game (`end_share`)
plans every lane to finish as early as it can, together; the straggler rule picks a batch
that has been in flight much longer than its provider's own history predicts. Whether a
provider may serve at all comes from outside (`eligible`, the router's); how large its batches
are comes from the `Sizer`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from fathom.inference.pool.options import PoolOptions
from fathom.inference.pool.sizing import MIN_PER_ITEM, Sizer
from fathom.inference.pool.state import Member, PoolState, Work
from fathom.inference.provider import Provider

Lane = tuple[float, float, float, int]  # (free at, fixed seconds, seconds per item, batch size)


@dataclass(frozen=True)
class Step:
    action: str  # "exit" | "wait" | "pull" | "dup"
    until: float | None = None  # wait: time to look again (None: on the next change)
    size: int = 0
    probe: bool = False
    work: Work | None = None


EXIT = Step("exit")
WAIT = Step("wait")


class Planner:
    def __init__(
        self,
        state: PoolState,
        options: PoolOptions,
        sizer: Sizer,
        eligible: Callable[[Provider], bool],
        reserve: Callable[[], bool],
    ):
        self.state, self.options, self.sizer = state, options, sizer
        self.eligible, self.reserve = eligible, reserve

    def next(self, m: Member) -> Step:
        job = self.state.job
        if job is None or job.finished or job.error is not None or not m.present:
            return EXIT
        now = self.state.clock.now()
        recheck = self.options.recheck
        if not self.eligible(m.provider):
            # Clearance or registry health can lapse or return with no event; look again.
            return Step("wait", until=now + recheck)
        probe = False
        if m.ejected_until is not None:
            if now < m.ejected_until:
                return Step("wait", until=m.ejected_until)
            if m.probing:
                return WAIT
            probe = True
        if now < m.cooldown_until:
            return Step("wait", until=m.cooldown_until)
        if m.is_cloud and self.reserve() and self.local_can_serve():
            # Backup holds the cloud in reserve; a local's clearance can lapse silently, so
            # look again now and then as well as on every change.
            return Step("wait", until=now + recheck)
        if job.queue:
            size = self.size(m, probe)
            if size == 0:  # the end game leaves what is left to faster lanes
                return Step("wait", until=now + recheck)
            return Step("pull", size=size, probe=probe)
        if probe:
            return WAIT
        work, next_at = self.straggler(m, now)
        if work is not None:
            return Step("dup", work=work)
        return Step("wait", until=next_at)

    def local_can_serve(self) -> bool:
        return any(
            not m.is_cloud and m.present and m.ejected_until is None and self.eligible(m.provider)
            for m in self.state.members.values()
        )

    def _floor(self, m: Member) -> int:
        return self.sizer.rate_floor(m.provider, m.lanes, m.sizing)

    def size(self, m: Member, probe: bool) -> int:
        """Items this lane pulls now; 0 when it should leave what is left to faster lanes."""
        job = self.state.job
        assert job is not None
        if probe:
            return self.options.min_batch
        floor = self._floor(m)
        n = m.sizing.capped(max(m.sizing.batch_size, floor))
        if m.sizing.expected(1) is not None and len(job.queue) < self._pull_capacity():
            share = self.end_share(m, len(job.queue))
            # Where requests are the scarce resource, a lane given any part takes a whole
            # request's worth: splitting the tail would spend requests to save seconds.
            n = min(n, share) if floor == 0 or share == 0 else n
        proven = self.sizer.proven(m.sizing, m.start)
        if n > proven and any(len(a.work.indices) > proven for a in m.attempts):
            # A size the provider never served is tried by one request at a time: if it is
            # over the provider's limit, that costs one refused request, not one per lane.
            # Where requests are the scarce resource the other lanes wait for the answer
            # rather than spend requests on small batches.
            n = 0 if floor else proven
        return min(n, len(job.queue))

    def _pull_capacity(self) -> int:
        return sum(m.sizing.batch_size * m.lanes for m in self.state.members.values() if m.present)

    def _lanes_now(self, m: Member, now: float) -> list[Lane]:
        """Every lane that can take part in the end game, as (free at, fixed s, s/item, batch)."""
        reserve_held = self.reserve() and self.local_can_serve()
        lanes: list[Lane] = []
        for o in self.state.members.values():
            if not (
                o.present
                and o.ejected_until is None
                and now >= o.cooldown_until
                and self.eligible(o.provider)
                and not (o.is_cloud and reserve_held)
            ):
                continue
            # A provider not measured yet (new to this pool and to its history) is taken to be
            # as fast as this one: a speed known from an earlier job must not let one provider
            # take the whole queue in its first pull.
            base, per = self.sizer.line_of((o if o.sizing.expected(1) is not None else m).sizing)
            floor = self._floor(o)
            size = max(1, o.sizing.capped(max(o.sizing.batch_size, floor)))
            busy = [max(now, a.started + a.expected) for a in o.attempts]
            lanes += [(t, base, per, size) for t in busy]
            # A lane waiting for a permit under a known request rate starts when the key's
            # window allows, perhaps seconds away: not counted on. Without one, a permit
            # comes as a request ends (or is granted already and its lane not yet resumed).
            waiting = o.admitting if floor else 0
            lanes += [(now, base, per, size)] * max(0, o.lanes - len(busy) - waiting)
        return lanes

    def end_share(self, m: Member, queued: int) -> int:
        """End game: this lane's part of what is left, such that every lane finishes the job
        as early as it can, together. Each lane is free when its batch in flight is expected
        to end (now, if idle), then works through batches of its provider's size, each
        costing its latency line (a request's fixed cost plus its cost per item). The
        earliest moment by which all lanes together can have done `queued` items is found by
        bisection; this lane takes what it can do by then (at most one batch now). Shares by
        speed alone would cut the tail into ever smaller batches, each paying the fixed cost
        again. A lane that could do no item by then takes none (0) and waits, unless no lane
        could finish one item sooner."""
        now = self.state.clock.now()
        lanes = self._lanes_now(m, now)
        base, per = self.sizer.line_of(m.sizing)
        mine = (now, base, per, max(1, m.sizing.capped(max(m.sizing.batch_size, self._floor(m)))))
        if mine not in lanes:
            lanes.append(mine)
        low = now
        high = min(now + t for t in (_time_for(lane, queued) - now for lane in lanes))
        for _ in range(64):
            if high - low < MIN_PER_ITEM / 10:  # finer than one item of the fastest lane
                break
            mid = (low + high) / 2
            if sum(_items_by(lane, mid) for lane in lanes) >= queued:
                high = mid
            else:
                low = mid
        share = _items_by(mine, high)
        if share >= 1:
            return share
        # Nobody's part rounds to an item: the lane that finishes one item first takes it.
        return 1 if _time_for(mine, 1) <= min(_time_for(lane, 1) for lane in lanes) + 1e-9 else 0

    def straggler(self, m: Member, now: float) -> tuple[Work | None, float | None]:
        """The batch this idle lane should duplicate now, or when to look again."""
        job = self.state.job
        assert job is not None
        best: Work | None = None
        best_started = math.inf
        next_at: float | None = None
        for work in job.live:
            if work.done or work.has_result or work.copies != 1:
                continue
            (a,) = work.attempts
            if a.member is m:
                continue
            # Overdue against its own provider's history (its latency line: a provider that
            # is simply slow, or a sliver paying a request's fixed cost, is not overdue), and
            # this lane expects to finish it sooner than the straggler has already taken.
            mine = m.sizing.expected(len(work.indices)) or 0.0
            at = max(a.started + self.options.straggler_factor * a.expected, a.started + mine)
            if now >= at:
                if a.started < best_started:
                    best, best_started = work, a.started
            elif next_at is None or at < next_at:
                next_at = at
        return best, next_at


def _items_by(lane: Lane, t: float) -> int:
    """Items a lane (free at, fixed seconds, seconds per item, batch size) has done by `t`."""
    free, base, per, size = lane
    left = t - free
    whole = base + per * size
    batches = int(left // whole) if whole > 0 else 0
    left -= batches * whole
    extra = int((left - base) / per + 1e-9) if left > base else 0
    return batches * size + max(0, min(size, extra))


def _time_for(lane: Lane, n: int) -> float:
    """When a lane would have done `n` items, batch after batch."""
    free, base, per, size = lane
    return free + math.ceil(n / size) * base + per * n
