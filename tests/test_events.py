"""governor.events: the facades' events, the subscriber registry, and no import cycle.

The facades emit; listeners (governor.metrics among them) subscribe. The
registry's rules are checked on their own, the facades' events against the
parametrised backends, and the module graph from the sources: events
imports no module of governor, and no facade module reaches governor.metrics.
"""

from __future__ import annotations

import ast
import dataclasses
import logging
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from governor import AsyncGovernor, Governor, GovernorConfig
from governor.events import Admitted, Event, emit, subscribe, unsubscribe

from .support.servers import free_port

ROOT = Path(__file__).resolve().parent.parent
MakeGov = Callable[..., Governor]
MakeAGov = Callable[..., AsyncGovernor]
FACADES = [
    f"governor.{side}.{module}" for side in ("_async", "_sync") for module in ("governor", "background", "retry")
]


@pytest.fixture
def seen() -> Iterator[list[Event]]:
    """Every event emitted while the test runs."""
    got: list[Event] = []
    subscribe(got.append)
    yield got
    unsubscribe(got.append)


def admitted(events: list[Event], name: str) -> list[Admitted]:
    return [e for e in events if isinstance(e, Admitted) and e.name == name]


# -- the registry -----------------------------------------------------------------------


def test_subscribers_get_every_event_in_order_until_they_unsubscribe() -> None:
    calls: list[tuple[str, Event]] = []

    def first(event: Event) -> None:
        calls.append(("first", event))

    def second(event: Event) -> None:
        calls.append(("second", event))

    subscribe(first)
    subscribe(second)
    subscribe(first)  # once, however often
    try:
        one = Admitted("g", 0.5, False)
        emit(one)
        assert calls == [("first", one), ("second", one)]
        unsubscribe(first)
        unsubscribe(first)  # not subscribed any more: nothing happens
        two = Admitted("g", 1.0, True)
        emit(two)
        assert calls[2:] == [("second", two)]
    finally:
        unsubscribe(first)
        unsubscribe(second)
    emit(Admitted("g", 2.0, False))
    assert len(calls) == 3


def test_a_failing_subscriber_is_logged_and_never_reaches_the_caller(
    seen: list[Event], caplog: pytest.LogCaptureFixture
) -> None:
    def broken(event: Event) -> None:
        raise ValueError("listener bug")

    subscribe(broken)
    try:
        with caplog.at_level(logging.ERROR, logger="governor"):
            emit(Admitted("g", 0.1, False))  # does not raise
    finally:
        unsubscribe(broken)
    assert admitted(seen, "g") == [Admitted("g", 0.1, False)]  # the others still got it
    [record] = [r for r in caplog.records if "event subscriber" in r.getMessage()]
    assert record.exc_info is not None and isinstance(record.exc_info[1], ValueError)


def test_an_interrupt_in_a_subscriber_goes_through() -> None:
    def interrupted(event: Event) -> None:
        raise KeyboardInterrupt

    subscribe(interrupted)
    try:
        with pytest.raises(KeyboardInterrupt):
            emit(Admitted("g", 0.1, False))
    finally:
        unsubscribe(interrupted)


def test_refusals() -> None:
    with pytest.raises(TypeError, match="callable"):
        subscribe("not a function")  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        Admitted("g", 0.1, False).waited_seconds = 2.0  # type: ignore[misc]


def test_subscribing_from_many_threads_while_emitting() -> None:
    got: dict[int, int] = {}
    lock = threading.Lock()

    def counter(i: int) -> Callable[[Event], None]:
        def count(event: Event) -> None:
            with lock:
                got[i] = got.get(i, 0) + 1

        return count

    counters = [counter(i) for i in range(16)]
    stop = threading.Event()

    def emitter() -> None:
        while not stop.is_set():
            emit(Admitted("threads", 0.0, False))

    def churn(fn: Callable[[Event], None]) -> None:
        for _ in range(200):
            subscribe(fn)
            unsubscribe(fn)
        subscribe(fn)

    emitters = [threading.Thread(target=emitter) for _ in range(2)]
    churners = [threading.Thread(target=churn, args=(fn,)) for fn in counters]
    for thread in emitters + churners:
        thread.start()
    for thread in churners:
        thread.join(30)
    try:
        got.clear()
        emit(Admitted("threads", 0.0, False))
        stop.set()
        for thread in emitters:
            thread.join(30)
        assert set(got) == set(range(16))  # every subscriber that ended subscribed is
    finally:
        stop.set()
        for fn in counters:
            unsubscribe(fn)


# -- what the facades emit --------------------------------------------------------------


def test_acquire_emits_admitted(make_gov: MakeGov, name: str, seen: list[Event]) -> None:
    gov = make_gov(GovernorConfig(max_capacity=2))
    with gov.acquire(timeout=5) as lease:
        assert not lease.local
    [event] = admitted(seen, name)
    assert event.waited_seconds >= 0 and event.local is False
    assert gov.try_acquire() is not None  # try_acquire never waits: no event
    assert len(admitted(seen, name)) == 1


async def test_async_acquire_emits_admitted(make_agov: MakeAGov, name: str, seen: list[Event]) -> None:
    gov = make_agov(GovernorConfig(max_capacity=2))
    async with await gov.acquire(timeout=5):
        pass
    [event] = admitted(seen, name)
    assert event.waited_seconds >= 0 and not event.local


def test_a_local_admission_says_so(name: str, seen: list[Event]) -> None:
    config = GovernorConfig(on_unavailable="local", local_capacity=1, redis_timeout=0.5)
    gov = Governor.from_url(f"redis://127.0.0.1:{free_port()}/0", name, config)
    try:
        lease = gov.acquire(timeout=5)
        assert lease.local
        lease.release()
    finally:
        gov.close()
    [event] = admitted(seen, name)
    assert event.local is True


def test_a_failing_subscriber_does_not_fail_acquire(make_gov: MakeGov, name: str) -> None:
    def broken(event: Event) -> None:
        raise RuntimeError("listener bug")

    gov = make_gov(GovernorConfig(max_capacity=1))
    subscribe(broken)
    try:
        with gov.acquire(timeout=5):
            assert gov.status().in_flight == 1
    finally:
        unsubscribe(broken)
    assert gov.status().in_flight == 0


def test_an_interrupt_while_emitting_gives_the_lease_back(make_gov: MakeGov, name: str) -> None:
    def interrupted(event: Event) -> None:
        if event.name == name:
            raise KeyboardInterrupt

    gov = make_gov(GovernorConfig(max_capacity=1))
    subscribe(interrupted)
    try:
        with pytest.raises(KeyboardInterrupt):
            gov.acquire(timeout=5)
    finally:
        unsubscribe(interrupted)
    assert gov.status().in_flight == 0  # released at once, not left to its TTL


# -- no import cycle ---------------------------------------------------------------------


def _module_path(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _imports(module: str) -> set[str]:
    """The modules of governor that ``module``'s source imports anywhere: at
    the top, inside functions, under TYPE_CHECKING. The package's own
    ``governor/__init__.py`` is left out: it imports everything public."""
    path = _module_path(module)
    assert path is not None, module
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1] if node.level else [])
            base = ".".join(p for p in (base, node.module or "") if p)
            candidates = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        found |= {c for c in candidates if c.startswith("governor.") and _module_path(c) is not None}
    return found


def _reaches(module: str) -> set[str]:
    seen, todo = set(), [module]
    while todo:
        for found in _imports(todo.pop()) - seen:
            seen.add(found)
            todo.append(found)
    return seen


def test_events_imports_nothing_of_governor() -> None:
    assert _imports("governor.events") == set()
    # and at run time: loaded on its own, it needs no module of governor
    probe = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('events_alone', {str(ROOT / 'governor' / 'events.py')!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "sys.modules['events_alone'] = module\n"
        "spec.loader.exec_module(module)\n"
        "print(sorted(m for m in sys.modules if m == 'governor' or m.startswith('governor.')))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("facade", FACADES)
def test_no_facade_module_reaches_metrics(facade: str) -> None:
    assert "governor.metrics" not in _reaches(facade)


def test_metrics_listens_through_events() -> None:
    """metrics subscribes to the facades' events, and may use the sync
    facade (the exporter's collector does, inside a method): that direction
    only, so there is no cycle."""
    imported = _imports("governor.metrics")
    assert "governor.events" in imported
    assert "governor._sync.governor" in imported  # the helper sees imports inside functions
    assert "governor.events" in _imports("governor._async.governor")
