"""call(): acquire, call, classify, report, release, retry (placeholder until the retry work lands)."""

from __future__ import annotations

from typing import Any


async def retry_call(governor: Any, fn: Any, args: Any, kwargs: Any, **options: Any) -> Any:
    raise NotImplementedError("Governor.call is not built yet")


def retry_decorator(governor: Any, **options: Any) -> Any:
    raise NotImplementedError("Governor.limit is not built yet")
