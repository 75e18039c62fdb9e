"""Classification of provider failures (placeholder until the retry work lands)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Classifier = Callable[[BaseException], Any]
