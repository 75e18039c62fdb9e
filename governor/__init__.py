"""fleet-governor: one adaptive limit for a fleet of LLM agents, kept in Redis.

Concurrency, and the provider's requests and tokens per minute (budgets).

from governor import Governor, GovernorConfig, Outcome

gov = Governor.from_url("redis://localhost:6379/0", "openai", GovernorConfig(max_capacity=128))
with gov.acquire(timeout=600, holder="host-3/agent-17") as lease:
    ...  # one LLM call, or one agent's whole run
    gov.report(Outcome.SUCCESS, lease=lease)
"""

from . import metrics as metrics  # its import subscribes the admission histogram to the facades' events
from ._async.governor import AsyncGovernor
from ._async.lease import AsyncLease
from ._sync.governor import Governor
from ._sync.lease import Lease
from .budgets import Budget, Tokens
from .classify import Classification, Verdict, default_classifier
from .config import GovernorConfig, RetryPolicy
from .core import Outcome, Status
from .errors import (
    AcquireTimeout,
    ConfigError,
    CostTooLarge,
    GovernorError,
    GovernorNotFound,
    GovernorUnavailable,
    LayoutError,
    LeaseLost,
    LeaseReported,
    Migrating,
    NotReplicated,
    QuotaExhausted,
    RedisFull,
    StateError,
    UsageTooLarge,
    WrongKeyType,
    WrongNode,
)
from .protocol import SCHEMA_VERSION, GovernorKeys, governor_keys
from .spend import SpendBudget, SpendExhausted, Window

__version__ = "0.1.0"

__all__ = [
    "SCHEMA_VERSION",
    "AcquireTimeout",
    "AsyncGovernor",
    "AsyncLease",
    "Budget",
    "Classification",
    "ConfigError",
    "CostTooLarge",
    "Governor",
    "GovernorConfig",
    "GovernorError",
    "GovernorKeys",
    "GovernorNotFound",
    "GovernorUnavailable",
    "LayoutError",
    "Lease",
    "LeaseLost",
    "LeaseReported",
    "Migrating",
    "NotReplicated",
    "Outcome",
    "QuotaExhausted",
    "RedisFull",
    "RetryPolicy",
    "SpendBudget",
    "SpendExhausted",
    "StateError",
    "Status",
    "Tokens",
    "UsageTooLarge",
    "Verdict",
    "Window",
    "WrongKeyType",
    "WrongNode",
    "default_classifier",
    "governor_keys",
]
