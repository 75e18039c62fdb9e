"""The policies: how capacity answers the provider.

A policy is a unit: its config class here (its own validated numbers), its
entry in the ``POLICIES`` table of ``lua/lib/policy.lua`` (its reaction to a
rate-limited attempt and to a success, its reset) and its entry in the
reference model (``tests/support/model.py``). :data:`REGISTRY` is what the config,
the protocol (the stored fields), the CLI and the tests read; adding a
policy is one class here, one Lua entry, one model entry.

- ``adaptive`` (the default): start low and climb while the provider
  accepts (no blind burst of ``max_capacity``), learn the lowest in-flight
  level the provider refused, hold just below it, probe it now and then,
  cut by ``cut_factor`` only when refused below it (the limit fell). No
  news is not bad news: callers that never report still see it climb.
  Its time constants follow ``window`` unless set.
- ``seed``: the seed governor's rules exactly: halve on 2 rate-limited
  attempts in the window (or a share over 30 %), pause on 4, +1 per 3
  successes.
- ``fixed``: capacity stays at ``max_capacity``; 429s are recorded and a
  provider's Retry-After still holds the fleet, but nothing is learnt.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar

from .errors import ConfigError
from .protocol import CONFIG, COUNT, DURATION, FLAG, POLICY_STATE, POSITIVE, SHARE, STATE, STATE_ORIGIN, STEP, Kind, ms


@dataclass(frozen=True)
class Policy:
    """The base of every policy's config: a name, stored fields, learnt state."""

    #: the name stored in Redis and given on the command line
    name: ClassVar[str] = ""
    #: the stored config field of each of the class's fields, and its kind
    stored: ClassVar[dict[str, tuple[str, Kind]]] = {}
    #: what the policy learns, in the ``policy`` hash (cleared by reset)
    state: ClassVar[dict[str, Kind]] = {}
    #: durations that, left at None, are this share of the governor's window
    follows_window: ClassVar[dict[str, float]] = {}

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None and f.name in self.follows_window:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigError(f"{self.name} policy: {f.name} must be a finite number, got {value!r}")
            if f.type in ("int", int) and not isinstance(value, int):
                raise ConfigError(f"{self.name} policy: {f.name} must be an integer, got {value!r}")
        self.validate()

    def validate(self) -> None:
        """Check the policy's own numbers (raise ConfigError)."""

    def resolved(self, window: float) -> Policy:
        """This policy with every duration left at None made its share of
        ``window`` (seconds): the numbers a governor with that window runs."""
        unset = {name: share * window for name, share in self.follows_window.items() if getattr(self, name) is None}
        return dataclasses.replace(self, **unset) if unset else self

    def script_fields(self, window: float = 60.0) -> dict[str, str]:
        """The stored config fields of this policy, as the scripts expect them
        (durations left at None follow ``window``, seconds)."""
        out = {}
        policy = self.resolved(window)
        for attr, (field, kind) in self.stored.items():
            value = getattr(policy, attr)
            if kind is DURATION:
                value = ms(value)
            out[field] = repr(value) if isinstance(value, float) else str(value)
        return out

    @classmethod
    def from_stored(cls, stored: dict[str, str]) -> Policy:
        """The policy config a stored config describes (the inverse of
        script_fields; a duration at its share of the stored window reads back
        as None: it follows the window)."""
        kw: dict[str, Any] = {}
        window_ms = int(stored.get("window_ms", 0))
        for attr, (field, kind) in cls.stored.items():
            raw = stored[field]
            if attr in cls.follows_window and int(raw) == ms(cls.follows_window[attr] * window_ms / 1000):
                kw[attr] = None  # its share of the window: it follows the window
                continue
            kw[attr] = int(raw) / 1000 if kind is DURATION else (float(raw) if kind is SHARE else int(raw))
        return cls(**kw)


def _at_least(policy: str, name: str, value: float, low: float) -> None:
    if value < low:
        raise ConfigError(f"{policy} policy: {name} must be >= {low}, got {value!r}")


def _share(policy: str, name: str, value: float, open_interval: bool = False) -> None:
    ok = 0.0 < value < 1.0 if open_interval else 0.0 <= value <= 1.0
    if not ok:
        bounds = "between 0 and 1 (exclusive)" if open_interval else "between 0 and 1"
        raise ConfigError(f"{policy} policy: {name} must be {bounds}, got {value!r}")


@dataclass(frozen=True)
class AdaptivePolicy(Policy):
    """The default: a slow start, then the provider's limit learnt from the
    in-flight levels it refused at, held just below, probed now and then.

    - Start (a new governor, a reset or ``configure()``, a state re-created
      after a loss): capacity starts at the resume level
      (``max(1, max_capacity * resume_fraction)``), never at ``max_capacity``,
      and adds one per success while nothing was refused: it doubles per
      call latency, the way TCP's slow start does, without a blind burst.
      ``resume_fraction=1.0`` starts at ``max_capacity``.
    - No news is not bad news: while callers wait with every slot taken,
      no Retry-After holds and no 429 is in the window, capacity grows by
      time whether or not anyone reports: it doubles every
      ``probe_interval`` the first waiter has waited while nothing was ever
      refused, and once a ceiling is learnt, a probe is due by time as
      after a streak of successes. A 429 report or a Retry-After stops it.
      So a launch gate whose leases live for hours and never report reaches
      ``max_capacity`` within about ``log2(1 / resume_fraction)`` probe
      intervals.
    - A new ``max_capacity`` set at run time keeps what was learnt: a lower
      one applies at once, a higher one is approached as any ceiling is
      (the slow start, the probes), never jumped to.
    - A 429 of a lease granted after the last cut, at ``level`` leases in
      flight: a probe refused (at or above the remembered ``ceiling``) puts
      capacity back to ``level - 1`` (the next probe of the same level waits
      twice as long, up to half a window); a first 429 below the ceiling (the
      limit fell, or other traffic took a share) remembers ``ceiling = level``
      and cuts to ``cut_factor * level``; refused again while climbing back
      from that cut, the limit is lower still: cut by ``cut_factor`` again and
      remember the cut as the ceiling (after a refused probe a 429 is no such
      news: the limit may sit between two levels). Within a window of a cut
      a refusal waits for the background's verdict only while the refusals
      since the cut are no more than the background (20 % while none is
      learnt) explains of the attempts since; a burst cuts again at once. A 429 of a lease granted
      before the last cut was counted in that cut and changes nothing.
    - Successes: below ``ceiling - 1`` one step each (back to just below the
      ceiling within about a latency); at ``ceiling - 1`` a probe after
      ``probe_interval`` (backed off while refused); at or above the ceiling
      (the limit rose) probes every half ``probe_interval``, the step doubling
      while the provider accepts, never beyond a quarter of capacity.
    - Pause only in a storm: refused at one in flight with ``pause_count``
      429s making ``pause_ratio`` of the window.
    """

    name: ClassVar[str] = "adaptive"
    #: rate-limited attempts in the window that (with pause_ratio, at one in flight) pause
    pause_count: int = 4
    #: the rate-limited share that must also be reached to pause
    pause_ratio: float = 0.5
    #: successes in a row before a probe
    increase_successes: int = 3
    #: refused below the remembered ceiling (the limit fell): cut to this share of the in-flight level
    cut_factor: float = 0.9
    #: time between probes of the ceiling (None: a quarter of the window)
    probe_interval: float | None = None

    stored: ClassVar[dict[str, tuple[str, Kind]]] = {
        "pause_count": ("pause_count", POSITIVE),
        "pause_ratio": ("pause_ratio", SHARE),
        "increase_successes": ("increase_successes", POSITIVE),
        "cut_factor": ("cut_factor", SHARE),
        "probe_interval": ("probe_ms", DURATION),
    }
    state: ClassVar[dict[str, Kind]] = {
        "streak": COUNT,  #: successes in a row since the last change
        "ceiling": COUNT,  #: lowest in-flight level refused since the limit was last seen to rise (0: none)
        "cut_fence": COUNT,  #: leases with a fence up to this were counted in the last cut
        "probe_at": COUNT,  #: ms of the last probe or cut
        "probe_step": STEP,  #: the next probe's step (doubles while the provider accepts)
        "probe_wait": COUNT,  #: ms between probes just below the ceiling (doubles while refused there)
        "climbing": FLAG,  #: cut (not a refused probe) since the last probe: a 429 then means lower still
        "background_ppm": COUNT,  #: the refusal share (per million) the provider shows whatever the fleet's load
        "cut_from": COUNT,  #: capacity before the last cut (what undoing it restores)
        "cut_ceiling": COUNT,  #: the ceiling before the last cut
        "cut_level": COUNT,  #: leases in flight at the last cut: the round admitted together (0: none)
        "cut_at": COUNT,  #: ms of the last cut
        "cut_share_ppm": COUNT,  #: the refusal share (per million) a window after it, at the level it left
        "round_fence": COUNT,  #: the fence at the last cut: leases up to it were in that round
        "round_refused": COUNT,  #: of that round, how many were refused
        "round_at": COUNT,  #: (ms) when that round was counted: its refusals are judged net of for a window
        "cut_seq": COUNT,  #: the attempts recorded before the last cut (event_seq then)
        "cut_refused": COUNT,  #: refusals of leases granted since the last cut, while its verdict is open
    }
    #: state fields added after the policy hash was first stored: a refusal
    #: reads them, absent as 0 (a state an older client created has none yet)
    later: ClassVar[tuple[str, ...]] = (
        "background_ppm",
        "cut_from",
        "cut_ceiling",
        "cut_level",
        "cut_at",
        "cut_share_ppm",
        "round_fence",
        "round_refused",
        "round_at",
        "cut_seq",
        "cut_refused",
    )
    follows_window: ClassVar[dict[str, float]] = {"probe_interval": 0.25}

    def validate(self) -> None:
        _at_least(self.name, "pause_count", self.pause_count, 1)
        _at_least(self.name, "increase_successes", self.increase_successes, 1)
        _share(self.name, "pause_ratio", self.pause_ratio)
        _share(self.name, "cut_factor", self.cut_factor, open_interval=True)
        if self.probe_interval is not None and not 0 <= self.probe_interval <= 86400:
            raise ConfigError(
                f"adaptive policy: probe_interval must be 0 to 86400 seconds (or None), got {self.probe_interval!r}"
            )


@dataclass(frozen=True)
class SeedPolicy(Policy):
    """The seed governor's rules exactly."""

    name: ClassVar[str] = "seed"
    #: rate-limited attempts in the window that halve capacity
    decrease_count: int = 2
    #: rate-limited share of the window above which capacity halves ...
    decrease_ratio: float = 0.30
    #: ... provided the window holds at least this many attempts
    ratio_min_attempts: int = 2
    #: capacity = max(1, floor(capacity * decrease_factor)) on a decrease
    decrease_factor: float = 0.5
    #: rate-limited attempts in the window that pause admissions
    pause_count: int = 4
    #: successes in a row that add one to capacity
    increase_successes: int = 3

    stored: ClassVar[dict[str, tuple[str, Kind]]] = {
        "decrease_count": ("decrease_count", POSITIVE),
        "decrease_ratio": ("decrease_ratio", SHARE),
        "ratio_min_attempts": ("ratio_min_attempts", POSITIVE),
        "decrease_factor": ("decrease_factor", SHARE),
        "pause_count": ("pause_count", POSITIVE),
        "increase_successes": ("increase_successes", POSITIVE),
    }
    state: ClassVar[dict[str, Kind]] = {"streak": COUNT}

    def validate(self) -> None:
        for name in ("decrease_count", "ratio_min_attempts", "pause_count", "increase_successes"):
            _at_least(self.name, name, getattr(self, name), 1)
        _share(self.name, "decrease_ratio", self.decrease_ratio)
        _share(self.name, "decrease_factor", self.decrease_factor, open_interval=True)


@dataclass(frozen=True)
class FixedPolicy(Policy):
    """Capacity stays at max_capacity: nothing is learnt (429s are still
    recorded, and a provider's Retry-After still holds the fleet)."""

    name: ClassVar[str] = "fixed"


#: every policy, by name
REGISTRY: dict[str, type[Policy]] = {p.name: p for p in (AdaptivePolicy, SeedPolicy, FixedPolicy)}
POLICY_NAMES: tuple[str, ...] = tuple(REGISTRY)


def policy_from(value: Policy | str) -> Policy:
    """A policy config from a Policy or a policy's name (its defaults)."""
    if isinstance(value, Policy):
        return value
    if isinstance(value, str) and value in REGISTRY:
        return REGISTRY[value]()
    raise ConfigError(f"policy must be one of {', '.join(POLICY_NAMES)} or a Policy instance, got {value!r}")


def config_kinds() -> dict[str, Kind]:
    """Every stored policy config field and its kind (one kind per name)."""
    return _kinds({field: kind for p in REGISTRY.values() for field, kind in p.stored.values()}, "config")


def state_kinds() -> dict[str, Kind]:
    """Every policy state field and its kind (one kind per name)."""
    return _kinds({field: kind for p in REGISTRY.values() for field, kind in p.state.items()}, "state")


def _kinds(merged: dict[str, Kind], what: str) -> dict[str, Kind]:
    for p in REGISTRY.values():
        own = dict(p.stored.values()) if what == "config" else p.state
        for field, kind in own.items():
            if merged[field] is not kind:
                raise AssertionError(f"policy {what} field {field} has two kinds")
    return merged


def fields() -> dict[str, dict[str, Kind]]:
    """Every stored field and its kind, by hash: the base fields of
    :mod:`governor.protocol` and each policy's own (its config and learnt state)."""
    config = {**CONFIG, "policy": Kind("POLICY", "str", values=POLICY_NAMES), **config_kinds()}
    return {"state": {**STATE, **STATE_ORIGIN}, "config": config, "policy": {**POLICY_STATE, **state_kinds()}}


def all_fields() -> dict[str, Kind]:
    """Every stored field's kind, whatever its hash (a name is in one hash only)."""
    out: dict[str, Kind] = {}
    for hash_fields in fields().values():
        for name, kind in hash_fields.items():
            if name in out:
                raise AssertionError(f"field {name} is in two hashes")
            out[name] = kind
    return out
