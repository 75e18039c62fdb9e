"""The key schema: see :mod:`governor.protocol`, which names every key.

Kept so that ``governor.keys`` imports keep working; new code imports
from :mod:`governor.protocol`.
"""

from .protocol import (
    DEFAULT_PREFIX,
    SCHEMA_VERSION,
    GovernorKeys,
    governor_keys,
    name_from_state_key,
    validate_name,
)

__all__ = ["DEFAULT_PREFIX", "SCHEMA_VERSION", "GovernorKeys", "governor_keys", "name_from_state_key", "validate_name"]
