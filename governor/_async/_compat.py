"""asyncio primitives for the facade in this package.

governor/_sync/_compat.py offers the same names for threads; the facade's
modules here (governor.py, background.py, retry.py) are written once against
these names and the sync ones are generated from them by scripts/unasync.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Generator
from types import TracebackType
from typing import Any, Generic, TypeVar

T = TypeVar("T")

log = logging.getLogger("governor")


class Event:
    """A one-shot flag a task can wait on with a timeout."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def set(self) -> None:
        self._event.set()

    def clear(self) -> None:
        self._event.clear()

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self, timeout: float | None) -> bool:
        """Wait until set or ``timeout`` seconds passed; True if set. A
        cancellation always reaches the caller (``asyncio.wait_for`` before
        3.12 drops it when the flag is set at the same moment)."""
        if self._event.is_set():
            return True
        waiting = asyncio.ensure_future(self._event.wait())
        try:
            await asyncio.wait((waiting,), timeout=timeout)
        finally:
            waiting.cancel()
        return self._event.is_set()


class Lock:
    """Guards state shared with the background worker.

    Critical sections never await, and one event loop runs one task at a
    time, so nothing is needed here; the thread version is a real lock.
    """

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


class Semaphore:
    """A fair counting semaphore with a timeout (the slots of the calls to
    Redis, the local fallback limit).

    A waiter that gives up (cancelled, or out of time) leaves its place in
    O(1): it is skipped when a unit is handed on, and the queue is compacted
    when such places outnumber the live ones (asyncio.Semaphore removes each
    from the middle of its queue, O(waiters): a storm of thousands of
    cancelled callers then costs the process more CPU than their calls).
    """

    def __init__(self, value: int) -> None:
        self._value = value
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._live = 0  # waiters in the queue that still wait

    async def acquire(self, timeout: float | None, urgent: bool = False) -> bool:
        """Take a unit within ``timeout`` seconds (None: wait); True if taken.
        ``urgent``: ahead of every waiter (a call that gives capacity back).
        A cancellation always reaches the caller; a unit handed to a caller
        cancelled at that moment goes on to the next."""
        if self._value > 0 and self._live == 0:
            self._value -= 1
            return True
        if timeout is not None and timeout <= 0:
            return False
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if urgent:
            self._waiters.appendleft(turn)
        else:
            self._waiters.append(turn)
        self._live += 1
        try:
            if timeout is None:
                await turn
            else:
                await asyncio.wait((turn,), timeout=timeout)
        except BaseException:
            self._leave(turn)
            raise
        if turn.done() and not turn.cancelled():
            return True
        self._leave(turn)
        return False

    def _leave(self, turn: asyncio.Future[None]) -> None:
        """A waiter gives up its place: a unit handed to it goes on."""
        if turn.done() and not turn.cancelled():
            self.release()
            return
        turn.cancel()
        self._live -= 1
        if len(self._waiters) > 2 * self._live + 64:
            self._waiters = deque(w for w in self._waiters if not w.done())

    def release(self) -> None:
        while self._waiters:
            turn = self._waiters.popleft()
            if not turn.done():
                self._live -= 1
                turn.set_result(None)
                return
        self._value += 1


class Worker:
    """A background task running ``target`` until it returns or is stopped."""

    def __init__(self, target: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
        self._task = asyncio.get_running_loop().create_task(target(), name=name)

    def alive(self) -> bool:
        return not self._task.done()

    async def stop(self, timeout: float) -> None:
        self._task.cancel()
        try:
            await asyncio.wait_for(self._task, timeout)
        except (asyncio.CancelledError, asyncio.TimeoutError):
            pass


async def sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


#: cleanups started again in a task of their own, referenced until they end
_again: set[asyncio.Task[None]] = set()


async def shielded(cleanup: Callable[[], Awaitable[T]]) -> T:
    """Run ``cleanup()`` to its end even if the calling task is cancelled.

    It runs in the caller's task: a task of its own for every call, as
    ``asyncio.shield`` makes, costs each release several turns of the event
    loop, and a cleanup is seldom cancelled. One that is cancelled midway is
    started again in a task of its own, and the cancellation goes on to the
    caller. So a cleanup must be idempotent: the ones the facade gives here
    (a release, a cancel, a report that releases) are, Redis ignoring the
    repeat of one that got through before the cancellation.
    """
    try:
        return await cleanup()
    except asyncio.CancelledError:
        task = asyncio.get_running_loop().create_task(_run_again(cleanup))
        _again.add(task)
        task.add_done_callback(_again.discard)
        raise


async def _run_again(cleanup: Callable[[], Awaitable[object]]) -> None:
    try:
        await cleanup()
    except Exception as error:  # noqa: BLE001 - nobody awaits this task: say it, and the TTLs clean up
        log.warning("a cleanup interrupted by a cancellation failed when sent again (%s); the TTLs clean up", error)


class AcquireContext(Coroutine[Any, Any, T], Generic[T]):
    """What ``AsyncGovernor.acquire`` returns: await it (or hand it to
    ``asyncio.create_task``), or ``async with`` it to release on the way out.

    A coroutine in its own right, delegating to the acquiring one, in the
    manner of aiohttp's request context managers.
    """

    __slots__ = ("_acquiring", "_lease")

    def __init__(self, acquiring: Coroutine[Any, Any, T]) -> None:
        self._acquiring = acquiring
        self._lease: Any = None

    def send(self, value: Any) -> Any:
        return self._acquiring.send(value)

    def throw(self, *args: Any) -> Any:
        return self._acquiring.throw(*args)

    def close(self) -> None:
        self._acquiring.close()

    def __await__(self) -> Generator[Any, None, T]:
        return self._acquiring.__await__()

    async def __aenter__(self) -> T:
        self._lease = await self._acquiring
        return self._lease  # type: ignore[no-any-return]

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._lease.__aexit__(exc_type, exc, tb)
