"""The sum of a sliding queue of steps, kept without ever subtracting (the "two stacks" queue).

Steps are added at the newest end and taken from the oldest; :meth:`SlidingSum.total` is the sum of
the steps held, in O(1) additions, and every step is added O(1) times over its life. A running sum
that subtracts what leaves would do the same with one addition less, but its rounding residue stays
in the sum forever (a window that once held 1e4 seconds of latency and now holds 1e-3 would carry
the leftovers of every subtraction); here each total is a fresh sum of the steps it covers, so its
error is that of one summation, as when the window is summed from scratch.

Each step carries two tags, ``first`` and ``last`` (the sequence numbers of the samples it goes from
and to), so the owner can drop the steps that start before a sample and sum an arbitrary range.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class SlidingSum(Generic[T]):
    """Steps ``(first, last, value)`` in the order pushed; ``add`` must be associative (the sums group
    the steps differently from left to right) and is always called as ``add(older, newer)``.

    The newest steps sit in ``_back`` with their running sum; the oldest in ``_front``, each with the
    sum of itself and every newer step of ``_front`` (built once, when ``_back`` is moved over).
    """

    __slots__ = ("_add", "_back", "_back_total", "_front")

    def __init__(self, add: Callable[[T, T], T]) -> None:
        self._add = add
        self._back: list[tuple[int, int, T]] = []
        self._back_total: T | None = None
        self._front: list[tuple[int, int, T, T]] = []  # oldest last: (first, last, value, suffix sum)

    def __len__(self) -> int:
        return len(self._front) + len(self._back)

    def push(self, first: int, last: int, value: T) -> None:
        self._back.append((first, last, value))
        self._back_total = value if self._back_total is None else self._add(self._back_total, value)

    def drop_starting_before(self, first: int) -> None:
        """Drops the oldest steps while they start before sample ``first``."""
        while True:
            if not self._front:
                if not self._back or self._back[0][0] >= first:
                    return
                self._move_back_to_front()
            if self._front[-1][0] >= first:
                return
            self._front.pop()

    def _move_back_to_front(self) -> None:
        suffix: T | None = None
        for first, last, value in reversed(self._back):
            suffix = value if suffix is None else self._add(value, suffix)
            self._front.append((first, last, value, suffix))
        self._back.clear()
        self._back_total = None

    def total(self) -> T | None:
        """The sum of every step held, oldest first; ``None`` when none is."""
        front = self._front[-1][3] if self._front else None
        if front is None:
            return self._back_total
        return front if self._back_total is None else self._add(front, self._back_total)

    def steps(self) -> Iterator[tuple[int, int, T]]:
        """The steps held, oldest first."""
        for first, last, value, _ in reversed(self._front):
            yield first, last, value
        yield from self._back
