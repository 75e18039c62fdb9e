"""GENERATED from governor/_async/retry.py by scripts/unasync.py; do not edit.

Change the asyncio source and run ``python scripts/unasync.py``.
"""

from __future__ import annotations

from typing import Any


def retry_call(governor: Any, fn: Any, args: Any, kwargs: Any, **options: Any) -> Any:
    raise NotImplementedError("Governor.call is not built yet")


def retry_decorator(governor: Any, **options: Any) -> Any:
    raise NotImplementedError("Governor.limit is not built yet")
