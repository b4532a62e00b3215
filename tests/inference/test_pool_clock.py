"""FakeClock: virtual time that moves only when every task waits, deterministically."""

import asyncio

from fathom.clock import Clock, SystemClock, wait_event
from tests.fake_clock import FakeClock


async def test_time_jumps_to_the_next_sleeper_only_when_everything_waits():
    clock = FakeClock()
    order: list[tuple[str, float]] = []

    async def sleeper(name: str, s: float) -> None:
        await clock.sleep(s)
        order.append((name, clock.now()))

    async def busy() -> None:
        # Ready work runs before time moves, however many turns it takes.
        for _ in range(100):
            await asyncio.sleep(0)
        order.append(("busy", clock.now()))

    await asyncio.gather(sleeper("b", 2.0), sleeper("a", 1.0), busy(), sleeper("c", 2.0))
    assert order == [("busy", 0.0), ("a", 1.0), ("b", 2.0), ("c", 2.0)]


async def test_many_workers_hours_of_virtual_time_same_result_every_run():
    async def run_once() -> list[tuple[int, float]]:
        clock = FakeClock()
        log: list[tuple[int, float]] = []

        async def worker(i: int) -> None:
            for k in range(50):
                await clock.sleep(1 + (i * 7 + k) % 5)
                log.append((i, clock.now()))

        await asyncio.gather(*(worker(i) for i in range(40)))
        return log

    first = await run_once()
    assert first == await run_once()
    assert max(t for _, t in first) > 100  # minutes of virtual time, in no real time


async def test_wait_event_times_out_in_virtual_time_and_sees_a_set():
    clock = FakeClock()
    ev = asyncio.Event()
    assert await wait_event(clock, ev, 30.0) is False
    assert clock.now() == 30.0

    async def setter() -> None:
        await clock.sleep(5)
        ev.set()

    t = asyncio.ensure_future(setter())
    assert await wait_event(clock, ev, 100.0) is True
    assert clock.now() == 35.0
    await t
    assert clock.pending == 0


async def test_cancelled_sleeper_does_not_move_time():
    clock = FakeClock()
    t = asyncio.ensure_future(clock.sleep(1000))
    await asyncio.sleep(0)
    t.cancel()
    await asyncio.gather(t, return_exceptions=True)
    await clock.sleep(1)
    assert clock.now() == 1.0


async def test_manual_mode_moves_only_when_advanced():
    clock = FakeClock(10.0, auto_advance=False)
    woke = asyncio.Event()

    async def sleeper() -> None:
        await clock.sleep(5)
        woke.set()

    t = asyncio.ensure_future(sleeper())
    for _ in range(10):
        await asyncio.sleep(0)
    assert not woke.is_set() and clock.now() == 10.0
    clock.advance(5)
    await t
    assert woke.is_set() and clock.now() == 15.0


def test_both_clocks_satisfy_the_protocol():
    assert isinstance(SystemClock(), Clock)
    assert isinstance(FakeClock(), Clock)
