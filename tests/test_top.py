"""``governor top``: the screen of a few real governors, rendered to text and driven headless.

The governors live on the session's real Redis under a key prefix of the
test's own, so the view lists them and nothing else. The live view is
driven with textual's pilot (``App.run_test()``), headless.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from rich.console import Console

from governor import Governor, GovernorConfig, Lease, Outcome, Tokens
from governor.cli import main
from governor.cli.top import make_app, read_all, render
from governor.policies import FixedPolicy


def text_of(renderable: Any) -> str:
    console = Console(record=True, width=160, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


class Fleet:
    def __init__(self, url: str) -> None:
        self.url = url
        self.client = redis.Redis.from_url(url)
        self.prefix = f"top{uuid.uuid4().hex[:8]}"
        self.govs: list[Governor] = []
        self.leases: list[Lease] = []

    def make(self, name: str, **config: Any) -> Governor:
        gov = Governor(self.client, name, GovernorConfig(key_prefix=self.prefix, policy=FixedPolicy(), **config))
        gov.status()
        self.govs.append(gov)
        return gov

    def close(self) -> None:
        for lease in self.leases:
            lease.release()
        for gov in self.govs:
            gov.close()
        self.client.close()


@pytest.fixture
def fleet(redis_url: str) -> Iterator[Fleet]:
    made = Fleet(redis_url)
    chat = made.make("chat", max_capacity=4, priorities=("high", "low"), default_priority="low")
    made.leases += [chat.acquire(timeout=5, priority="high", tenant="acme"), chat.acquire(timeout=5, tenant="zeta")]
    made.make("batch", max_capacity=2).pause("nightly maintenance", duration=600)
    embed = made.make("embed", max_capacity=8, tokens_per_minute=6000)
    made.leases.append(embed.acquire(timeout=5, tokens=Tokens(1500), tenant="acme"))
    yield made
    made.close()


def test_the_screen_shows_every_governor_with_its_queue_holds_and_budgets(fleet: Fleet) -> None:
    seen = read_all(fleet.client, fleet.prefix)
    assert [s.name for s in seen] == ["batch", "chat", "embed"]
    screen = text_of(render(seen))
    rows = {line.split("│")[1].strip(): line for line in screen.splitlines() if line.count("│") > 7}
    assert [c.strip() for c in rows["chat"].split("│")[2:8]] == ["open", "4", "4", "-", "2", "0"]
    assert [c.strip() for c in rows["batch"].split("│")[2:8]] == ["paused", "0", "2", "-", "0", "0"]
    assert "paused: nightly maintenance" in rows["batch"]
    assert "holds: paused by the operator: nightly maintenance, ends " in screen
    assert "(in 9m5" in screen or "(in 10m00s)" in screen  # a 600 s pause, read just now
    assert "acme" in screen and "zeta" in screen and "high" in screen
    budget = next(line for line in screen.splitlines() if "configured" in line).strip("│ ").split()
    assert budget[0] == "tokens" and budget[2:5] == ["6,000", "1,500", "6,000"]
    level = int(budget[1].replace(",", ""))
    assert 4500 <= level < 4600  # 6,000 less the lease's 1,500, refilled at 100/s since
    assert budget[5] == f"{(6000 - level) * 60 / 6000:.1f}s"  # until the bucket is full again


def test_a_hold_shows_its_reason_and_end(fleet: Fleet) -> None:
    fleet.govs[0].report(Outcome.RATE_LIMITED, retry_after=30)
    screen = text_of(render(read_all(fleet.client, fleet.prefix)))
    assert "holds: provider's retry-after, ends " in screen


async def test_the_live_view_reads_again_and_pauses_on_space(fleet: Fleet) -> None:
    readings: list[int] = []

    def read() -> Any:
        readings.append(1)
        return read_all(fleet.client, fleet.prefix)

    app = make_app(read, interval=30)  # the pilot asks for readings itself
    async with app.run_test(size=(160, 60)) as pilot:
        screen = app.query_one("#screen")
        assert "nightly maintenance" in text_of(screen.content)
        fleet.govs[1].pause("model migration")  # chat
        await pilot.press("r")
        assert "model migration" in text_of(screen.content)
        await pilot.press("space")
        assert app.frozen and "paused" in app.sub_title
        app._tick()  # a tick while frozen reads nothing
        assert len(readings) == 2
        await pilot.press("q")
    assert app.return_code == 0


def test_the_command_prints_one_screen(fleet: Fleet) -> None:
    result = CliRunner().invoke(main, ["--url", fleet.url, "--prefix", fleet.prefix, "top", "--once"])
    assert result.exit_code == 0, result.output
    assert "3 governor(s)" in result.output and "nightly maintenance" in result.output
