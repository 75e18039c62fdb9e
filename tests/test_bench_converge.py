"""The swarm's agents through the Gemini and Bedrock SDKs, and how long the
fleet took to come down to a hidden limit (``python -m bench.converge``).

The swarms run on an in-process fakeredis with the mock provider answering
in each SDK's own shape, a limit of 2 that the start (a capacity of 4) is
above, so some calls are refused: each SDK's refusal is told apart and
retried until every call is done.
"""

from __future__ import annotations

import json
from typing import Any

import fakeredis
import pytest

from bench import converge, policy_sim
from bench.embedded import Backend
from bench.provider import ProviderConfig
from bench.scenario import Scenario
from bench.swarm import run_swarm


@pytest.mark.parametrize("client", ["gemini", "bedrock"])
async def test_the_swarms_agents_call_through_the_gemini_and_bedrock_sdks(client: str) -> None:
    backend = Backend("fakeredis", None, fake_server=fakeredis.FakeServer())
    scenario = Scenario(
        hosts=1, agents=6, calls=3, strategies=("fleet",), max_capacity=16, window=1.0, poll=0.25,
        backoff_base=0.05, max_time=60, lead=0.2, client=client,
    )  # fmt: skip
    provider = ProviderConfig(limit=2, latency_mean=0.05, latency_sigma=0.0, retry_after=0.05)
    result = await run_swarm(scenario, provider, backend)
    m = result.runs["fleet"].metrics
    assert m.done == 1.0 and m.errors == 0, m.error_samples
    assert m.ok == 6 * 3
    assert m.limited > 0  # the start (a quarter of 16) is above the limit: refusals, told apart and retried


def _trace(capacity: list[int], limited: list[int], offered_from: float) -> dict[str, Any]:
    times = [0.5 * i for i in range(len(capacity))]
    return {
        "provider": {
            "columns": ["t", "limit", "served", "offered", "peak_offered", "ok", "limited"],
            "rows": [[t, 8, 0, 1 if t >= offered_from else 0, 0, 0, n] for t, n in zip(times, limited, strict=True)],
        },
        "governor": {
            "columns": ["t", "capacity", "in_flight", "queued", "paused"],
            "rows": [[t, c, 0, 0, 0] for t, c in zip(times, capacity, strict=True)],
        },
    }


def test_convergence_is_the_first_time_at_the_target_that_holds_for_a_window() -> None:
    # capacity 24 at the start, 8 at 1.5 s for a moment, back to 12, then 8 from 3.0 s on
    capacity = [24, 24, 24, 8, 12, 12, 8, 9, 8, 7, 8, 8]
    limited = [0, 0, 16, 16, 18, 20, 22, 22, 23, 23, 23, 23]
    found = converge.convergence(_trace(capacity, limited, offered_from=1.0), target=8, window=2.0)
    assert found == {"first_call": 1.0, "seconds": 2.0, "refusals": 22, "held": True}
    assert converge.convergence(_trace(capacity, [0] * 12, offered_from=99), target=8, window=2.0) is None  # no call
    never = converge.convergence(_trace([24] * 12, limited, offered_from=0.0), target=8, window=2.0)
    assert never is not None and never["seconds"] is None


def test_the_command_reads_a_swarms_results(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    data = {
        "scenario": {"window": 2.0},
        "provider": {"limit": 8},
        "strategies": {"fleet": {"trace": _trace([24, 24, 8, 8, 8, 8, 8, 8], [0, 0, 16, 16, 16, 16, 17, 17], 0.5)}},
    }
    path = tmp_path / "swarm.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    assert converge.main([str(path)]) == 0
    assert "fleet: 0.5 s from the first call, 16 429s before it" in capsys.readouterr().out
    assert converge.main([str(tmp_path / "missing.json")]) == 2
    assert "give the swarm.json" in capsys.readouterr().out


def test_the_policy_simulation_follows_a_limit_that_falls() -> None:
    """``python -m bench.policy_sim``: the real Lua on fakeredis, a fake clock."""
    run = policy_sim.simulate(
        fakeredis.FakeRedis(), 1, limit=12, schedule=((2.0, 6),), noise=0.0, agents=16, seconds=5.0, tick=0.05
    )
    assert run.ok > 0 and run.refused > 0  # the start and the fall are above the limit
    assert max(c for t, c in run.trace if t >= 4.0) <= 7  # down to the new limit (a probe above it at most)
    assert policy_sim.windows_until(run.trace, 2.0, 6, 1.0) is not None
    assert policy_sim.seconds_until([(0.0, 3), (0.5, 5), (1.0, 6)], 0.0, 6) == 0.5
