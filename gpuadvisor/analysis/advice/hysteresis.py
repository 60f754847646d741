"""Hysteresis: advice is sent only once it has held for several cycles, and withdrawn cleanly.

One advisor cycle proposes a set of recommendations. A proposal becomes *active* (sent to the
sinks) after it has been proposed in ``hold_cycles`` consecutive cycles; an active one is
*resolved* (withdrawn, sent once as resolved) after it has been missing from ``clear_cycles``
consecutive cycles. A cycle whose inputs cannot be trusted proposes nothing: it counts as a miss
for every recommendation, under the same ``clear_cycles`` rule, so that advice that cannot be
checked against fresh data is withdrawn after ``clear_cycles`` such cycles, while a single
untrusted cycle neither withdraws everything at once nor makes the advice come back later as new
(with a new ``first_seen``). It also breaks every hold streak: a proposal not yet active starts
counting again. Identity is the recommendation's stable ``id``; its text and gain follow the
latest cycle.

The state is an immutable value, so two advisor replicas fed the same cycles agree exactly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from gpuadvisor.model import Recommendation


@dataclass(frozen=True, slots=True)
class HysteresisSettings:
    """``hold_cycles`` proposals in a row before sending; ``clear_cycles`` misses to withdraw."""

    hold_cycles: int = 2
    clear_cycles: int = 2

    def __post_init__(self) -> None:
        if self.hold_cycles < 1 or self.clear_cycles < 1:
            raise ValueError(
                "hysteresis: hold_cycles and clear_cycles must be >= 1, "
                f"got {self.hold_cycles} and {self.clear_cycles}"
            )


@dataclass(frozen=True, slots=True)
class Tracked:
    """One recommendation id across cycles: its latest version and its streaks."""

    recommendation: Recommendation
    first_seen_s: float
    proposed_cycles: int = 1
    missing_cycles: int = 0
    active_since_s: float | None = None

    @property
    def active(self) -> bool:
        return self.active_since_s is not None


def _frozen(tracked: Mapping[str, Tracked]) -> Mapping[str, Tracked]:
    return MappingProxyType(dict(tracked))


@dataclass(frozen=True, slots=True)
class Debounced:
    """Every tracked id; ``active`` lists those the sinks should currently carry."""

    tracked: Mapping[str, Tracked] = field(default_factory=lambda: _frozen({}))

    @property
    def active(self) -> tuple[Tracked, ...]:
        return tuple(t for t in self.tracked.values() if t.active)


@dataclass(frozen=True, slots=True)
class Change:
    """What one cycle changed: ``new`` just became active, ``resolved`` was just withdrawn."""

    active: tuple[Tracked, ...]
    new: tuple[Tracked, ...]
    resolved: tuple[Tracked, ...]


def step(
    state: Debounced,
    proposed: Iterable[Recommendation] | None,
    now_s: float,
    settings: HysteresisSettings = HysteresisSettings(),
) -> tuple[Debounced, Change]:
    """Fold one cycle's proposals into the state; ``None`` means the inputs were not trusted: a
    miss for every recommendation, withdrawn under the same ``clear_cycles`` rule."""
    latest: dict[str, Recommendation] = {}
    for rec in proposed or ():
        latest.setdefault(rec.id, rec)
    tracked: dict[str, Tracked] = {}
    new: list[Tracked] = []
    resolved: list[Tracked] = []
    for rid, rec in latest.items():
        before = state.tracked.get(rid)
        if before is None:
            now = Tracked(rec, first_seen_s=now_s)
        else:
            proposed_cycles = before.proposed_cycles + 1 if not before.missing_cycles else 1
            now = replace(
                before, recommendation=rec, proposed_cycles=proposed_cycles, missing_cycles=0
            )
        if not now.active and now.proposed_cycles >= settings.hold_cycles:
            now = replace(now, active_since_s=now_s)
            new.append(now)
        tracked[rid] = now
    for rid, before in state.tracked.items():
        if rid in latest:
            continue
        missing = replace(before, missing_cycles=before.missing_cycles + 1)
        if not before.active:
            continue  # a proposal that never became active is simply forgotten
        if missing.missing_cycles >= settings.clear_cycles:
            resolved.append(missing)
        else:
            tracked[rid] = missing
    after = Debounced(_frozen(tracked))
    return after, Change(after.active, tuple(new), tuple(resolved))
