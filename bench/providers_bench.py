"""Headerless providers, tokens-bound: Gemini and Bedrock through their real SDKs.

    python -m bench.providers_bench --provider gemini --hosts 2 --agents 12 --seconds 40
    python -m bench.providers_bench --provider bedrock --strategy sdk

The mock provider (bench/provider.py) serves the provider's shape with a
tokens-per-period limit (input + output, charged at the start as prompt +
max tokens, the unused part given back at the end), a hidden concurrency
limit far above what the tokens allow, and no rate-limit headers (as the
Gemini API and Bedrock send none). ``--hosts`` host processes of
``--agents`` threads each call it in a loop for ``--seconds``:

- ``governed``: the provider's real SDK through its governed client
  (``gemini_client(governor=...)``, ``bedrock_client(governor=...)``) on
  one governor in a private redis-server, ``GovernorConfig(max_capacity=64)``
  and nothing else: no limit configured, nothing learnt from headers.
- ``sdk``: the same SDK with its own retries (google-genai
  ``HttpRetryOptions(attempts=5)``, boto3 ``standard`` mode with 5 attempts)
  and no governor.

Printed: steady-state (the second half of the run) token goodput as a
share of the provider's refill rate, and the share of the provider's
answers that were 429s, both read from the provider's own record.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import sys
import threading
import time
from typing import Any

from governor import GovernorConfig

from .provider import OK, MockProvider, ProviderConfig
from .redis_server import RedisServer

#: the scenario: a tokens-bound account (tokens per PERIOD seconds)
PERIOD = 10.0
TOKENS = 40_000
MAX_TOKENS = 200
PROMPT = "Summarise the state of the fleet in one paragraph. " * 4


def provider_config(seed: int = 1, headers: bool = False) -> ProviderConfig:
    """The account; ``headers``: the OpenAI and Anthropic shapes announce it
    (the mock sends the headers of each configured limit)."""
    return ProviderConfig(
        limit=200,
        latency_mean=0.3,
        latency_sigma=0.3,
        per_token_latency=0.002,
        # headers say "per minute": an account that announces its limit has a minute's period
        tpm=TOKENS * round(60 / PERIOD) if headers else TOKENS,
        rate_period=60.0 if headers else PERIOD,
        burst=0.05 if headers else 0.25,  # a minute's bucket holding 3 s of it: steady within the run
        completion_mean=100.0,
        completion_sigma=0.6,
        retry_after="auto",
        seed=seed,
    )


def host(
    kind: str, strategy: str, url: str, redis_url: str, agents: int, seconds: float, out: Any, ready: Any, go: Any
) -> None:
    """One host process: ``agents`` threads calling the provider for ``seconds``
    from the moment every host is ready (``ready``, then ``go``)."""
    from governor import Governor, GovernorConfig
    from governor.config import RetryPolicy

    gov = None
    if strategy == "governed":
        gov = Governor.from_url(redis_url, f"bench-{kind}", GovernorConfig(max_capacity=64))
    retry = RetryPolicy(max_attempts=6, deadline=30.0)
    errors = 0
    lock = threading.Lock()
    stop = 0.0

    if kind.startswith("litellm"):
        out.put(_litellm_host(kind, strategy, url, redis_url, agents, seconds, ready, go))
        return
    if kind == "gemini":
        from google import genai
        from google.genai import types

        from governor.providers import gemini_client

        if gov is not None:
            client = gemini_client(governor=gov, retry=retry, api_key="k", http_options={"base_url": url})
        else:
            options = types.HttpOptions(base_url=url, retry_options=types.HttpRetryOptions(attempts=5))
            client = genai.Client(api_key="k", http_options=options)
        config = types.GenerateContentConfig(max_output_tokens=MAX_TOKENS)

        def once() -> None:
            client.models.generate_content(model="gemini-2.5-flash", contents=PROMPT, config=config)

    else:
        import boto3
        from botocore.config import Config

        from governor.providers.bedrock import bedrock_client

        common: dict[str, Any] = {
            "endpoint_url": url,
            "region_name": "us-east-1",
            "aws_access_key_id": "k",
            "aws_secret_access_key": "k",
        }
        if gov is not None:
            client = bedrock_client(governor=gov, retry=retry, **common)
        else:
            retries: Any = {"mode": "standard", "total_max_attempts": 5}
            client = boto3.client("bedrock-runtime", config=Config(retries=retries, max_pool_connections=64), **common)
        messages = [{"role": "user", "content": [{"text": PROMPT}]}]

        def once() -> None:
            client.converse(
                modelId="amazon.nova-lite-v1:0", messages=messages, inferenceConfig={"maxTokens": MAX_TOKENS}
            )

    def agent() -> None:
        nonlocal errors
        while time.monotonic() < stop:
            try:
                once()
            except Exception:  # noqa: BLE001 - a call that failed in the end: counted
                with lock:
                    errors += 1

    ready.put(True)
    go.wait(300)
    stop = time.monotonic() + seconds
    threads = [threading.Thread(target=agent, daemon=True) for _ in range(agents)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 60)
    out.put(errors)
    if gov is not None:
        gov.close()


def _litellm_host(
    kind: str, strategy: str, url: str, redis_url: str, agents: int, seconds: float, ready: Any, go: Any
) -> int:
    """A host of ``agents`` coroutines calling ``litellm.acompletion`` (governed: through ``litellm_client``)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    from governor import AsyncGovernor, GovernorConfig
    from governor.config import RetryPolicy
    from governor.providers.litellm import litellm_client

    litellm.suppress_debug_info = True
    shape: dict[str, Any] = {
        "api_key": "k",
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": MAX_TOKENS,
    }
    if kind == "litellm-openai":
        shape.update(model="openai/gpt-4o-mini", api_base=url + "/v1")
    else:
        shape.update(model="anthropic/claude-sonnet-4", api_base=url)

    async def main() -> int:
        errors = 0
        gov = None
        if strategy == "governed":
            gov = AsyncGovernor.from_url(redis_url, f"bench-{kind}", GovernorConfig(max_capacity=64))
            llm = litellm_client(gov, retry=RetryPolicy(max_attempts=6, deadline=30.0))
            call: Any = llm.acompletion
            extra: dict[str, Any] = {}
        else:
            call, extra = litellm.acompletion, {"num_retries": 5}
        ready.put(True)
        await asyncio.get_running_loop().run_in_executor(None, go.wait, 300)
        stop = time.monotonic() + seconds

        async def agent() -> None:
            nonlocal errors
            while time.monotonic() < stop:
                try:
                    await call(**shape, **extra)
                except Exception as error:  # noqa: BLE001 - a call that failed in the end: counted
                    if not errors:
                        print(f"first failure: {error!r}"[:500], file=sys.stderr)
                    errors += 1

        await asyncio.gather(*(agent() for _ in range(agents)))
        if gov is not None:
            await gov.aclose()
        return errors

    return asyncio.run(main())


def run(kind: str, strategy: str, hosts: int, agents: int, seconds: float, redis_url: str) -> dict[str, Any]:
    loop = asyncio.new_event_loop()
    config = provider_config(headers=kind.startswith("litellm"))
    provider = MockProvider(config)
    url = loop.run_until_complete(provider.start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    queue: Any = multiprocessing.Queue()
    ready: Any = multiprocessing.Queue()
    go = multiprocessing.Event()
    procs = [
        multiprocessing.Process(target=host, args=(kind, strategy, url, redis_url, agents, seconds, queue, ready, go))
        for _ in range(hosts)
    ]
    for proc in procs:
        proc.start()
    for _ in procs:
        ready.get(timeout=300)  # every host has imported its SDK and built its client
    loop.call_soon_threadsafe(provider.reset)
    time.sleep(0.2)
    go.set()
    failed = sum(queue.get(timeout=seconds + 120) for _ in procs)
    for proc in procs:
        proc.join(30)
    record = provider.record
    asyncio.run_coroutine_threadsafe(provider.stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    start, end = seconds / 2, seconds
    steady = [(a, e, k) for a, e, k in record.responses if start <= a < end]
    refused = sum(1 for _, _, k in steady if k != OK)
    rate = config.refill_rate("tokens") or 1.0
    goodput = record.tokens_between(start, end) / (end - start)
    return {
        "provider": kind,
        "strategy": strategy,
        "hosts": hosts,
        "agents": hosts * agents,
        "seconds": seconds,
        "refill_tokens_per_s": rate,
        "steady_goodput": round(goodput / rate, 3),
        "steady_429_share": round(refused / max(1, len(steady)), 4),
        "steady_answers": len(steady),
        "calls_failed": failed,
        "refused_by_reason": dict(record.refused),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--provider", choices=("gemini", "bedrock", "litellm-openai", "litellm-anthropic"), action="append"
    )
    parser.add_argument("--strategy", choices=("governed", "sdk"), action="append")
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--agents", type=int, default=12)
    parser.add_argument("--seconds", type=float, default=40.0)
    args = parser.parse_args()
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    with RedisServer() as redis:
        # a governor on a Redis younger than a lease TTL holds admissions (a restarted Redis lost its leases)
        redis.wait_older_than(GovernorConfig().lease_ttl)
        for kind in args.provider or ["gemini", "bedrock"]:
            for strategy in args.strategy or ["governed", "sdk"]:
                result = run(kind, strategy, args.hosts, args.agents, args.seconds, redis.url)
                json.dump(result, sys.stdout)
                print(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
