"""Who waits, and in what order: one FIFO per project, served round-robin across projects.

One key serves every project on the server, so a project that queues a thousand batches must
not starve one that queues ten: the next permit goes to the next project in turn, and within a
project to its oldest waiter. A waiter that gives up (cancelled) is removed wherever it stands.
It owns only the order; whether a permit may be granted now is the budget's decision.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterator
from typing import Generic, TypeVar

W = TypeVar("W")


class WaitingLine(Generic[W]):
    def __init__(self) -> None:
        # Insertion order of the OrderedDict is the turn order: the project served last moves
        # to the end.
        self._by_project: OrderedDict[str, deque[W]] = OrderedDict()

    def __len__(self) -> int:
        return sum(len(q) for q in self._by_project.values())

    def __bool__(self) -> bool:
        return bool(self._by_project)

    def join(self, project: str, waiter: W) -> None:
        self._by_project.setdefault(project, deque()).append(waiter)

    def leave(self, project: str, waiter: W) -> bool:
        q = self._by_project.get(project)
        if q is None:
            return False
        try:
            q.remove(waiter)
        except ValueError:
            return False
        if not q:
            del self._by_project[project]
        return True

    def next(self) -> tuple[str, W] | None:
        """Take the head of the project whose turn it is, and pass the turn on."""
        if not self._by_project:
            return None
        project, q = next(iter(self._by_project.items()))
        waiter = q.popleft()
        if q:
            self._by_project.move_to_end(project)
        else:
            del self._by_project[project]
        return project, waiter

    def waiting(self) -> dict[str, int]:
        return {p: len(q) for p, q in self._by_project.items()}

    def __iter__(self) -> Iterator[tuple[str, W]]:
        for p, q in self._by_project.items():
            for w in q:
                yield p, w
