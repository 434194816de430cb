"""A load error the operator fixes with a setting reaches Triton's log as its one line.

The Python backend's stub reports an exception that leaves ``initialize`` through pybind11, which
appends every Python frame the exception passed through: "At:" and the server's file paths, three
times over. So the model's ``initialize`` is made here of C parts only (`frameless`):
``functools.reduce`` calls the Python build step, which returns normally and leaves its outcome in an
``asyncio.Future``; the future's iterator, also C, then raises the error the step stored, with no
frame on it. Any other error (a bug) leaves through the build step and keeps its traceback.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

from triton_backend.memory_budget import CacheDoesNotFit
from triton_backend.settings import InvalidSettings

#: Errors whose message says which setting to change and how; nothing in their traceback helps.
OPERATOR_ERRORS: tuple[type[Exception], ...] = (InvalidSettings, CacheDoesNotFit)


class _NoLoop:
    """The future runs no callbacks; asyncio.Future asks its loop only whether it is in debug mode."""

    def get_debug(self) -> bool:
        return False


def frameless(build: Callable[[Any], object]) -> Callable[[Any], object]:
    """`build` as a callable made of C parts only, for one call: an `OPERATOR_ERRORS` error it raises
    is raised again without a traceback (the same exception, its message intact)."""
    future: asyncio.Future[None] = asyncio.Future(loop=_NoLoop())  # type: ignore[arg-type]

    def attempt(args: Any, outcome: asyncio.Future[None]) -> None:
        try:
            build(args)
        except OPERATOR_ERRORS as err:
            err.__context__ = err.__cause__ = None
            outcome.set_exception(err.with_traceback(None))
        else:
            outcome.set_result(None)

    # reduce(attempt, iterator, args): attempt(args, future) on the iterator's first item (the pending
    # future itself), then the iterator's next step raises the future's error, or ends on its result.
    return functools.partial(functools.reduce, attempt, iter(future))
