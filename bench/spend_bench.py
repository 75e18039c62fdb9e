"""The spend benchmark: dollar budgets against a provider that bills by tokens.

Two scenarios, each the same swarm with and without the guard:

- ``caps``: three tenants with daily dollar caps of their own and a fleet
  cap below their sum (a calendar day in UTC: no run crosses its end), the
  real ``openai`` SDK (async) in every agent, each tenant's agents through an
  ``AsyncGovernedTransport`` that reserves the most a call can cost and
  settles its usage. Measured per scope (each tenant, the fleet): what the
  provider billed against the cap, the reservations in flight when the guard
  first refused a call in that scope, and the dollars served up to the cap
  against the unguarded swarm's;
- ``rolling``: Gemini's spend limit (calls refused once 10 dollars were
  billed in the last 10 minutes), scaled down in time by 60: the provider
  refuses past ``limit`` dollars billed in the last ``window`` seconds (10 s
  by default), the governed fleet has a rolling budget of the same limit
  and window and waits for it (``wait_for_spend``). Measured: the
  provider's refusals in the first window and after it, and the most the
  provider billed in any window.

The provider is :class:`bench.provider.MockProvider` with billing added
here (:class:`SpendingProvider`): each answer served is billed its usage
times the model's :class:`governor.prices.Price`, to the tenant its request
names (``x-sim-tenant``), and an optional rolling cap refuses with a 429.
Its other behaviour is the mock's own. The governor prices calls with the
same prices (a PriceBook of them), so what it reserves and settles and what
the provider bills are the same function of the tokens.

aiohttp is imported through bench.provider: this module needs the ``bench`` extra.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from aiohttp import web

from governor.errors import ConfigError
from governor.prices import MICROS, Price, PriceBook, Usage

from . import kit
from .provider import MockProvider, ProviderConfig

#: the request header naming the tenant a call is billed to
TENANT_HEADER = "x-sim-tenant"
#: the models of the two scenarios and their prices (USD per million tokens)
CAPS_MODEL, ROLLING_MODEL = "bench-spend", "bench-gemini"
PRICES = (
    Price("openai", CAPS_MODEL, input=2, output=8),
    Price("openai", ROLLING_MODEL, input=100, output=400),
)
#: the fleet's scope, as SpendExhausted and the spend hash name it
FLEET = "*"
#: the caps scenario's swarms: straight to the provider, through a governor with no spend budget, with them
VARIANTS = ("unguarded", "governed", "guarded")
#: the rolling scenario's governed fleets: a budget of the provider's window, and one a slot longer
ROLLING_SAME, ROLLING_LONGER = "governed", "governed, window + 1 slot"


def price_book() -> PriceBook:
    """The governor's prices: the bench's own, no table."""
    return PriceBook(list(PRICES), table=False)


@dataclass(frozen=True)
class RollingCap:
    """The provider's spend limit: no call once ``limit_micros`` were billed in the last ``window`` seconds."""

    limit_micros: int
    window: float

    def __post_init__(self) -> None:
        if self.limit_micros < 1 or self.window <= 0:
            raise ConfigError(f"a rolling cap needs a limit >= 1 micro-dollar and a window > 0 s, got {self!r}")


class SpendingProvider(MockProvider):
    """The mock provider, billing each answer served (non-streamed chat
    completions) by its usage and the model's price, per tenant; with
    ``cap``, refusing every request once the cap's window holds its limit."""

    def __init__(self, config: ProviderConfig, prices: Sequence[Price] = PRICES, cap: RollingCap | None = None) -> None:
        self.prices = {p.model.lower(): p for p in prices}
        self.cap = cap
        self.bills: list[tuple[float, str, int]] = []  #: (seconds since the run's start, tenant, micro-dollars)
        self.refusals: list[tuple[float, str]] = []  #: (seconds since the run's start, tenant) of cap refusals
        self._window: deque[tuple[float, int]] = deque()
        self._in_window = 0
        super().__init__(config)

    def reset(self, config: ProviderConfig | None = None, start_at: float | None = None) -> None:
        super().reset(config, start_at)
        self.bills, self.refusals = [], []
        self._window.clear()
        self._in_window = 0

    def in_window(self, now: float) -> int:
        """Micro-dollars billed in the cap's window ending at ``now``."""
        assert self.cap is not None
        while self._window and self._window[0][0] <= now - self.cap.window:
            self._in_window -= self._window.popleft()[1]
        return self._in_window

    async def _handle(self, request: web.Request, api: str) -> web.StreamResponse:
        run = self._run
        tenant = request.headers.get(TENANT_HEADER, "-")
        if self.cap is not None and self.in_window(self.now()) >= self.cap.limit_micros:
            self.refusals.append((self.now(), tenant))
            message = (
                f"Spend limit reached: {self.cap.limit_micros / MICROS:g} USD per {self.cap.window:g} s; "
                "try again when the window has room."
            )
            body = {"error": {"message": message, "type": "requests", "param": None, "code": "spend_limit"}}
            return web.json_response(body, status=429)
        response = await super()._handle(request, api)
        if run is self._run and response.status == 200 and isinstance(response, web.Response):
            self._bill(response, tenant)
        return response

    def _bill(self, response: web.Response, tenant: str) -> None:
        body = response.body
        if not isinstance(body, bytes):
            return
        data = json.loads(body)
        usage, model = data.get("usage"), str(data.get("model", "")).lower()
        if not usage or model not in self.prices:
            return
        micros = self.prices[model].micros(Usage(usage["prompt_tokens"], usage["completion_tokens"]))
        now = self.now()
        self.bills.append((now, tenant, micros))
        if self.cap is not None:
            self._window.append((now, micros))
            self._in_window += micros


# -- settings ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """A run's numbers; dollars as decimal text, times in seconds."""

    #: each tenant's daily cap (caps)
    tenant_caps: tuple[tuple[str, str], ...] = (("a", "0.20"), ("b", "0.30"), ("c", "0.60"))
    #: the fleet's daily cap (caps): below the tenants' sum, so the last tenant stops at the fleet's
    fleet_cap: str = "1.00"
    #: agents per tenant (caps), agents of the fleet (rolling)
    agents: int = 4
    #: how long each caps run lasts
    caps_seconds: float = 12.0
    #: the provider's rolling spend limit, dollars per ``window`` (Gemini's: 10 per 10 minutes)
    rolling_limit: str = "10"
    #: the rolling window, seconds (Gemini's 600 s scaled down by 60)
    window: float = 10.0
    #: how long each rolling run lasts
    rolling_seconds: float = 30.0
    #: prompt sizes, characters: uniform in [low, high]
    prompt_chars: tuple[int, int] = (1600, 2400)
    #: max_tokens of every call
    max_tokens: int = 150
    #: mean and sigma of the lognormal completion (capped by max_tokens)
    completion_mean: float = 100.0
    completion_sigma: float = 0.3
    #: mean of the provider's service time
    latency: float = 0.1
    #: an unguarded agent's pause after a refusal (its client's backoff)
    backoff: float = 1.0
    #: a guarded agent's pause after SpendExhausted before it tries again
    retry_pause: float = 0.1
    seed: int = 7

    def __post_init__(self) -> None:
        if self.agents < 1 or self.caps_seconds <= 0 or self.rolling_seconds <= self.window or self.window < 1:
            raise ConfigError(
                "agents >= 1, caps_seconds > 0 and rolling_seconds > window >= 1 s (the rolling run needs a window "
                f"after the first), got {self!r}"
            )

    def provider(self) -> ProviderConfig:
        return ProviderConfig(
            limit=10_000,
            latency_mean=self.latency,
            latency_sigma=0.3,
            completion_mean=self.completion_mean,
            completion_sigma=self.completion_sigma,
            seed=self.seed,
        )

    def micros(self, dollars: str) -> int:
        return round(float(dollars) * MICROS)


# -- the swarm ---------------------------------------------------------------------------------


@dataclass
class Swarm:
    """What the agents saw: the guard's first refusal per scope (time, reserved
    in flight then, spent then), calls served, refusals."""

    first_refusal: dict[str, tuple[float, int, int]] = field(default_factory=dict)
    served: int = 0
    exhausted: int = 0
    throttled: int = 0
    errors: list[str] = field(default_factory=list)


def _prompt(rng: random.Random, settings: Settings) -> list[dict[str, str]]:
    return [{"role": "user", "content": "x" * rng.randint(*settings.prompt_chars)}]


async def run_swarm(
    provider: SpendingProvider,
    settings: Settings,
    model: str,
    tenants: Sequence[str],
    seconds: float,
    governor: Any = None,
    wait_for_spend: bool = False,
) -> Swarm:
    """``settings.agents`` agents per tenant calling ``model`` for ``seconds``,
    through ``governor`` (an AsyncGovernor with spend budgets) or not."""
    import httpx
    import openai

    from governor.spend import SpendExhausted, read_lines
    from governor.transport import AsyncGovernedTransport

    swarm = Swarm()
    book = price_book()
    clients = {}
    for tenant in tenants:
        http = None
        if governor is not None:
            prices = book if governor.config.spend else None
            transport = AsyncGovernedTransport(
                governor, tenant=tenant, profile="openai", prices=prices, wait_for_spend=wait_for_spend,
                timeout=seconds + 5,
            )  # fmt: skip
            http = httpx.AsyncClient(transport=transport, timeout=30)  # type: ignore[arg-type]  # duck-typed
        clients[tenant] = openai.AsyncOpenAI(
            base_url=provider.url + "/v1", api_key="sk-sim", max_retries=0, http_client=http,
            default_headers={TENANT_HEADER: tenant},
        )  # fmt: skip
    provider.reset()
    start = time.monotonic()
    deadline = start + seconds

    async def refused(error: SpendExhausted) -> None:
        if error.scope in swarm.first_refusal or governor is None:
            return
        swarm.first_refusal[error.scope] = (time.monotonic() - start, -1, -1)
        raw = await governor.client.hgetall(governor.keys.spend)
        lines = read_lines(raw, round(time.time() * 1000))
        line = next((x for x in lines if x.scope == error.scope), None)
        if line is not None:
            swarm.first_refusal[error.scope] = (swarm.first_refusal[error.scope][0], line.reserved, line.spent)

    async def agent(tenant: str, number: int) -> None:
        rng = random.Random(f"{settings.seed}-{tenant}-{number}")
        client = clients[tenant]
        while time.monotonic() < deadline:
            try:
                await asyncio.wait_for(
                    client.chat.completions.create(
                        model=model,
                        messages=_prompt(rng, settings),
                        max_tokens=settings.max_tokens,  # type: ignore[arg-type]
                    ),
                    max(0.01, deadline - time.monotonic()),
                )
                swarm.served += 1
            except asyncio.TimeoutError:
                break
            except SpendExhausted as error:
                swarm.exhausted += 1
                await refused(error)
                await asyncio.sleep(settings.retry_pause)
            except openai.RateLimitError:
                swarm.throttled += 1
                await asyncio.sleep(settings.backoff)
            except openai.APIError as error:
                if len(swarm.errors) < 5:
                    swarm.errors.append(f"{type(error).__name__}: {error}")
                await asyncio.sleep(0.05)

    try:
        await asyncio.gather(*(agent(t, n) for t in tenants for n in range(settings.agents)))
    finally:
        for client in clients.values():
            await client.close()
    return swarm


def _governor(client: Any, budgets: tuple[Any, ...], agents: int) -> Any:
    from governor import AsyncGovernor, GovernorConfig

    name = f"spend-bench-{random.randrange(1 << 30):08x}"
    config = GovernorConfig(max_capacity=agents, policy="fixed", restart_hold=False, spend=budgets)
    return AsyncGovernor(client, name, config)


# -- the scenarios -----------------------------------------------------------------------------


def _reached(bills: Sequence[tuple[float, str, int]], scope: str, amount: int) -> float | None:
    """When the bills of ``scope`` (FLEET: all) first added up to ``amount``."""
    total = 0
    for t, tenant, micros in bills:
        if scope in (FLEET, tenant):
            total += micros
            if total >= amount:
                return t
    return None


def _billed(bills: Sequence[tuple[float, str, int]], scope: str) -> int:
    return sum(m for _, tenant, m in bills if scope in (FLEET, tenant))


async def run_caps(
    provider: SpendingProvider, client: Any, settings: Settings, log: Callable[[str], None]
) -> dict[str, Any]:
    """The caps scenario: the unguarded swarm, then the guarded one; per scope its figures."""
    from governor.spend import SpendBudget

    tenants = [t for t, _ in settings.tenant_caps]
    caps = {t: settings.micros(d) for t, d in settings.tenant_caps}
    caps[FLEET] = settings.micros(settings.fleet_cap)
    budget = SpendBudget("daily", "day", limit=settings.fleet_cap, tenants=dict(settings.tenant_caps), threshold=0)
    runs: dict[str, Any] = {}
    agents = settings.agents * len(tenants)
    for label in VARIANTS:
        gov = None if label == "unguarded" else _governor(client, (budget,) if label == "guarded" else (), agents)
        log(f"caps: {label} swarm, {settings.caps_seconds:g} s")
        try:
            swarm = await run_swarm(provider, settings, CAPS_MODEL, tenants, settings.caps_seconds, gov)
        finally:
            if gov is not None:
                await gov.aclose()
        bills = list(provider.bills)
        runs[label] = {
            "served": swarm.served,
            "exhausted": swarm.exhausted,
            "throttled": swarm.throttled,
            "errors": swarm.errors,
            "first_refusal": swarm.first_refusal,
            "billed": {s: _billed(bills, s) for s in caps},
            "to_95": {s: _reached(bills, s, math.ceil(0.95 * caps[s])) for s in caps},
            "to_cap": {s: _reached(bills, s, caps[s]) for s in caps},
        }
    scopes = {}
    for scope, cap in caps.items():
        g, u, n = runs["guarded"], runs["unguarded"], runs["governed"]
        first = g["first_refusal"].get(scope)
        billed = g["billed"][scope]
        scopes[scope] = {
            "own_cap_reached": first is not None,
            "governed_to_95": n["to_95"][scope],
            "cap": cap,
            "billed": billed,
            "unguarded_billed": u["billed"][scope],
            "over": billed - cap,
            "reached_at": None if first is None else first[0],
            "in_flight_then": None if first is None else first[1],
            "spent_then": None if first is None else first[2],
            "goodput_ratio": min(billed, cap) / min(u["billed"][scope], cap) if u["billed"][scope] else None,
            "to_95": g["to_95"][scope],
            "unguarded_to_95": u["to_95"][scope],
        }
    return {"runs": runs, "scopes": scopes}


async def run_rolling(
    provider: SpendingProvider, client: Any, settings: Settings, log: Callable[[str], None]
) -> dict[str, Any]:
    """The rolling scenario: the ungoverned fleet, then the governed one, against the provider's cap."""
    from governor.spend import SpendBudget, Window

    limit = settings.micros(settings.rolling_limit)
    provider.cap = RollingCap(limit, settings.window)
    same = Window.rolling(settings.window)
    # one slot longer, in one more slot: each charge counts for at least the provider's window
    longer = Window.rolling(settings.window * (same.slots + 1) / same.slots, same.slots + 1)
    variants = {
        "ungoverned": None,
        ROLLING_SAME: SpendBudget("rolling", same, limit=settings.rolling_limit, threshold=0),
        ROLLING_LONGER: SpendBudget("rolling", longer, limit=settings.rolling_limit, threshold=0),
    }
    runs = {}
    try:
        for label, budget in variants.items():
            gov = None if budget is None else _governor(client, (budget,), settings.agents)
            log(f"rolling: {label} fleet, {settings.rolling_seconds:g} s")
            try:
                swarm = await run_swarm(
                    provider, settings, ROLLING_MODEL, ["fleet"], settings.rolling_seconds, gov, wait_for_spend=True
                )
            finally:
                if gov is not None:
                    await gov.aclose()
            bills, refusals = list(provider.bills), list(provider.refusals)
            windows = math.ceil(settings.rolling_seconds / settings.window)
            per_window = [0] * windows
            for t, _, m in bills:
                per_window[min(windows - 1, int(t // settings.window))] += m
            runs[label] = {
                "served": swarm.served,
                "billed": _billed(bills, FLEET),
                "refused_first_window": sum(1 for t, _ in refusals if t < settings.window),
                "refused_after": sum(1 for t, _ in refusals if t >= settings.window),
                "most_in_a_window": _most_in_window(bills, settings.window),
                "billed_per_window": per_window,
                "exhausted": swarm.exhausted,
                "errors": swarm.errors,
            }
    finally:
        provider.cap = None
    return {"limit": limit, "window": settings.window, "runs": runs}


def _most_in_window(bills: Sequence[tuple[float, str, int]], window: float) -> int:
    """The most billed in any window of ``window`` seconds (ending at a bill)."""
    most, total, start = 0, 0, 0
    for t, _, micros in bills:
        total += micros
        while bills[start][0] <= t - window:
            total -= bills[start][2]
            start += 1
        most = max(most, total)
    return most


async def run_spend(
    settings: Settings, redis_url: str, scenarios: Sequence[str], log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Every scenario asked for, against a provider served in this process and the Redis at ``redis_url``."""
    import redis.asyncio as aioredis

    provider = SpendingProvider(settings.provider())
    await provider.start()
    client = aioredis.Redis.from_url(redis_url)
    result: dict[str, Any] = {"settings": asdict(settings), "cells": {}}
    try:
        result["redis_version"] = (await client.info("server")).get("redis_version")
        if "caps" in scenarios:
            result["cells"]["caps"] = await run_caps(provider, client, settings, log)
        if "rolling" in scenarios:
            result["cells"]["rolling"] = await run_rolling(provider, client, settings, log)
    finally:
        await client.aclose()
        await provider.stop()
    return result


# -- outputs -----------------------------------------------------------------------------------


def usd(micros: int | None) -> str:
    return "-" if micros is None else f"{'-' if micros < 0 else ''}${abs(micros) / MICROS:.4f}"


def secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def goals(result: Mapping[str, Any]) -> list[tuple[str, str, bool | None]]:
    out: list[tuple[str, str, bool | None]] = []
    caps = result["cells"].get("caps")
    if caps is not None:
        scopes = caps["scopes"]
        within = [s["billed"] - s["cap"] <= (s["in_flight_then"] or 0) for s in scopes.values()]
        out.append((
            "caps: no tenant and not the fleet billed more than its cap plus the reservations in flight when it "
            "was reached",
            ", ".join(f"{_scope(k)} {usd(v['billed'])} of {usd(v['cap'])} (in flight {usd(v['in_flight_then'])})"
                      for k, v in scopes.items()),
            all(within),
        ))  # fmt: skip
        reached = {k: v for k, v in scopes.items() if v["own_cap_reached"]}
        out.append((
            "caps: dollars served up to each cap reached within 2 % of the unguarded swarm's (a tenant the fleet "
            "cap stopped first left out)",
            ", ".join(f"{_scope(k)} {kit.num(v['goodput_ratio'])}" for k, v in reached.items()),
            all(v["goodput_ratio"] is not None and v["goodput_ratio"] >= 0.98 for v in reached.values()),
        ))  # fmt: skip
    rolling = result["cells"].get("rolling")
    for label in (ROLLING_SAME, ROLLING_LONGER):
        if rolling is None or label not in rolling["runs"]:
            continue
        g = rolling["runs"][label]
        out.append((
            f"rolling ({label}): the fleet under the provider's limit, no refusals after the first window",
            f"most billed in a window {usd(g['most_in_a_window'])} of {usd(rolling['limit'])}, "
            f"refusals {g['refused_first_window']} then {g['refused_after']}",
            g["refused_after"] == 0 and g["most_in_a_window"] <= rolling["limit"],
        ))  # fmt: skip
    return out


def _scope(scope: str) -> str:
    return "fleet" if scope == FLEET else f"tenant {scope}"


def table(result: Mapping[str, Any]) -> str:
    lines = []
    caps = result["cells"].get("caps")
    if caps is not None:
        head, rows = _caps_rows(caps)
        lines += [kit.aligned(head, rows), ""]
    rolling = result["cells"].get("rolling")
    if rolling is not None:
        head, rows = _rolling_rows(rolling)
        lines += [kit.aligned(head, rows), ""]
    lines.append(kit.goal_lines(goals(result)))
    return "\n".join(lines)


def _caps_rows(caps: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    head = ["scope", "cap", "billed (guarded)", "over the cap", "in flight when reached", "reached at (s)",
            "billed (unguarded)", "served up to the cap, guarded / unguarded", "95 % of cap at (s): guarded",
            "governed, no spend budget", "unguarded"]  # fmt: skip
    rows = []
    for scope, s in caps["scopes"].items():
        ratio = kit.num(s["goodput_ratio"]) if s["own_cap_reached"] else f"({kit.num(s['goodput_ratio'])})"
        rows.append([
            _scope(scope), usd(s["cap"]), usd(s["billed"]), usd(s["over"]), usd(s["in_flight_then"]),
            secs(s["reached_at"]), usd(s["unguarded_billed"]), ratio, secs(s["to_95"]), secs(s["governed_to_95"]),
            secs(s["unguarded_to_95"]),
        ])  # fmt: skip
    return head, rows


def _rolling_rows(rolling: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    head = ["fleet", "calls served", "billed", "most billed in a window", "billed per window",
            "refused, first window", "refused after it"]  # fmt: skip
    rows = []
    for label, r in rolling["runs"].items():
        rows.append([
            label, str(r["served"]), usd(r["billed"]), usd(r["most_in_a_window"]),
            " / ".join(usd(x) for x in r["billed_per_window"]), str(r["refused_first_window"]),
            str(r["refused_after"]),
        ])  # fmt: skip
    return head, rows


def markdown(result: Mapping[str, Any], command: str) -> str:
    s = result["settings"]
    env = result.get("environment", {})
    lines = [
        "# Spend benchmark",
        "",
        "Dollar budgets (`GovernorConfig.spend`) against the mock provider (`bench.provider`) billing each "
        "answer its usage times a price table (`bench/spend_bench.py`: `SpendingProvider`); the governor prices "
        "calls with the same prices. The real `openai` SDK (async) in every agent, each tenant's agents "
        "through an `AsyncGovernedTransport` (the governed and guarded runs) or straight to the provider (the others); "
        f"prompts of {s['prompt_chars'][0]}-{s['prompt_chars'][1]} characters, `max_tokens` {s['max_tokens']}, "
        f"completions lognormal (mean {s['completion_mean']:g} tokens), service time {s['latency']:g} s on "
        f"average. {env.get('cpus', '?')} CPUs, Python {env.get('python', '?')}, Redis "
        f"{result.get('redis_version') or '?'} (a private server unless `--redis-url`), the agents, the provider "
        "and the governors' clients in one process.",
        "",
        "Reproduce:",
        "",
        "```",
        command,
        "```",
        "",
    ]
    verdicts = goals(result)
    if verdicts:
        lines += ["## Goals", "", "| goal | measured | met |", "|---|---|---|"]
        lines += [f"| {g} | {m} | {'-' if ok is None else ('yes' if ok else 'no')} |" for g, m, ok in verdicts]
        lines.append("")
    caps = result["cells"].get("caps")
    if caps is not None:
        tenant_caps = ", ".join(f"{t} ${d}" for t, d in s["tenant_caps"])
        lines += [
            "## caps: tenants' daily caps and a fleet cap",
            "",
            f"Three tenants of {s['agents']} agents each, model `{CAPS_MODEL}` at $2 / $8 per million input / "
            f"output tokens; a `day` budget (UTC) with tenant caps {tenant_caps} and a fleet cap "
            f"${s['fleet_cap']} (below the tenants' sum: the last tenant stops at the fleet's cap, not its own). "
            "The same swarm ran three times: *unguarded* (straight to the provider), *governed, no spend budget* "
            "(the same governor and transport with no `spend`: what the transport costs by itself) and *guarded*, "
            f"{s['caps_seconds']:g} s each; an agent refused by the guard (`SpendExhausted`) tries again "
            f"{s['retry_pause']:g} s later.",
            "",
        ]
        head, rows = _caps_rows(caps)
        lines += [*kit.markdown_table(head, rows), ""]
        lines += [
            "Columns: *billed*: what the provider billed the scope over the run; *over the cap*: billed minus the "
            "cap (negative: under it); *in flight when reached*: the scope's reservations not yet settled (the "
            "spend hash, read at once) when the guard first refused a call of that scope, and *reached at* "
            "when that was; *served up to the cap*: min(billed, cap), guarded over unguarded (in brackets for a "
            "tenant the fleet's cap stopped before its own); *95 % of cap at*: when the provider's bills for the "
            "scope first added up to 95 % of its cap, in each swarm (for the fleet and the last tenant the "
            "swarms differ by design: the other tenants stop only in the guarded one).",
            "",
        ]
    rolling = result["cells"].get("rolling")
    if rolling is not None:
        lines += [
            "## rolling: Gemini's spend limit, time scaled down by 60",
            "",
            f"Gemini refuses calls once 10 dollars were billed in the last 10 minutes. Here the provider refuses "
            f"every call (429) once ${s['rolling_limit']} were billed in the last {s['window']:g} s (an exact "
            f"sliding window over the bills), and sends no header saying so. {s['agents']} agents, model "
            f"`{ROLLING_MODEL}` at $100 / $400 per million tokens (about 9 cents a call), "
            f"{s['rolling_seconds']:g} s per run. The *governed* fleet has a rolling budget of the same limit "
            f'and window (`Window.rolling({s["window"]:g})`: 10 slots, as `"10m"` has); the *governed, window '
            f"+ 1 slot* fleet one of {s['window'] * 1.1:g} s in 11 slots (a slot more held back). Both wait for "
            "room (`wait_for_spend=True`); the ungoverned agents call straight "
            f"on and pause {s['backoff']:g} s after a refusal.",
            "",
        ]
        head, rows = _rolling_rows(rolling)
        lines += [*kit.markdown_table(head, rows), ""]
        lines += [
            "Columns: *most billed in a window*: the most the provider billed in any "
            f"{s['window']:g} s; *billed per window*: per consecutive {s['window']:g} s from the start; "
            "*refused*: the provider's spend-limit refusals before the end of the first window and after it.",
            "",
            "A rolling budget of n slots counts a charge for its own slot and the n after it "
            "(`lua/lib/spending.lua`): for at least its window after the charge, at most one slot more. A budget "
            "of the provider's own window therefore never admits a call the provider's exact window would refuse "
            "for an older charge.",
            "",
        ]
    return "\n".join(lines)


__all__ = [
    "PRICES",
    "RollingCap",
    "Settings",
    "SpendingProvider",
    "goals",
    "markdown",
    "price_book",
    "run_caps",
    "run_rolling",
    "run_spend",
    "run_swarm",
    "table",
]
