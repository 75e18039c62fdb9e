"""Client-side metrics (placeholder until the operator work lands)."""

from __future__ import annotations


def observe_admission(name: str, seconds: float) -> None:
    """Record how long a caller waited for admission to governor ``name``."""
    return None
