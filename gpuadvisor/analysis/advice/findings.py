"""One advisor cycle, pure: from the live state to the findings the advisor exposes and sends.

The findings hold the idle split (why free GPUs sit idle), fragmentation against the pending
queue's shapes, and the recommendations (`advice`, `reclaim` and `share`). When an input is not
trusted (stale or down) the cycle finds nothing: no numbers and no advice from data it cannot
vouch for.

When part of the cluster is missing (``LiveState.missing_nodes``: nodes the queue names or that
were seen recently, but no agent reports) the cycle is *degraded*: its numbers describe the
visible part, and only advice that rests on visible nodes alone is given. That is
``reclaim-idle`` and ``share`` (one job's own GPUs, or light jobs packed within one node, all of
them reported: a job with a GPU on a missing node is left out of the snapshot whole). The
ordering and placement kinds are withheld: they compare the whole queue's plan (who fits where,
when the head can start), which the missing nodes are part of, so none of them can be checked.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gpuadvisor.analysis.advice.pack import ShareSettings, share
from gpuadvisor.analysis.advice.predicted import (
    PlannedRuntimes,
    PredictionSummary,
    with_runtime_evidence,
)
from gpuadvisor.analysis.advice.reclaim import ReclaimSettings, reclaim_idle
from gpuadvisor.analysis.advice.reorder import (
    AdviceSettings,
    advise_planned,
    capacity_of,
    first_promises,
)
from gpuadvisor.analysis.estimates import estimate_runtime
from gpuadvisor.analysis.fragmentation import Fragmentation, WorkloadMix, measure
from gpuadvisor.analysis.idle import IdleSplit, split_idle
from gpuadvisor.analysis.prediction import RuntimePredictor
from gpuadvisor.analysis.scheduling.corrected_limits import InflationHistory
from gpuadvisor.model import MILLI_PER_GPU, Job, Kind, LiveState, Recommendation

_PER_JOB_GAIN = frozenset({Kind.START_NOW, Kind.RECLAIM_IDLE, Kind.SHARE})
LOCAL_KINDS = frozenset({Kind.RECLAIM_IDLE, Kind.SHARE})
"""Advice that rests on reported GPUs of one job or one node alone: all a degraded cycle gives."""


@dataclass(frozen=True, slots=True)
class AnalysisSettings:
    """What the advice and the idle-reclaim checks need."""

    advice: AdviceSettings = field(default_factory=AdviceSettings)
    reclaim: ReclaimSettings = field(default_factory=ReclaimSettings)
    share: ShareSettings = field(default_factory=ShareSettings)


@dataclass(frozen=True, slots=True)
class Findings:
    """What one cycle found. ``trusted`` False: inputs were stale, everything else is empty."""

    trusted: bool
    recommendations: tuple[Recommendation, ...] = ()
    gpus: int = 0
    allocated_gpus: float = 0.0
    idle: IdleSplit | None = None
    fragmentation: Fragmentation | None = None
    pending_jobs: int = 0
    running_jobs: int = 0
    predictions: PredictionSummary | None = None
    """How the jobs were planned when runtimes were predicted (None: planned with limits)."""
    missing_nodes: tuple[str, ...] = ()
    """Nodes named or seen but not reported (``degraded``); advice depends on none of them."""
    first_promises: tuple[tuple[str, float], ...] = ()
    """The first promised start of each waiting job that held the head's reservation, by job
    id, for the next cycle (``analyse``'s ``promised_s``; ``reorder.first_promises``)."""

    @property
    def degraded(self) -> bool:
        return bool(self.missing_nodes)

    @property
    def expected_gain_ratio(self) -> float:
        """GPUs the advice would make busy now, as a share of all GPUs (0-1). Counted from the
        per-job kinds only: ``queue-blocked`` sums the ``start-now`` gains it lists."""
        if not self.gpus:
            return 0.0
        busy = sum(r.gain.gpus_busy_now for r in self.recommendations if r.kind in _PER_JOB_GAIN)
        return min(1.0, busy / self.gpus)


def _waiting_shapes(pending: tuple[Job, ...]) -> list[tuple[Job, int]]:
    counts: Counter[tuple[object, ...]] = Counter()
    first: dict[tuple[object, ...], Job] = {}
    for job in pending:
        counts[job.fit_key] += 1
        first.setdefault(job.fit_key, job)
    return [(first[key], count) for key, count in counts.items()]


def _corrected(
    planned: PlannedRuntimes | None, inflation: InflationHistory | None
) -> Callable[[Job], float | None] | None:
    """The history-corrected bound of a job, floored at its prediction (None: raw limits)."""
    if planned is None or inflation is None:
        return None
    return lambda job: inflation.bound(job, planned(job))


def analyse(
    live: LiveState,
    settings: AnalysisSettings = AnalysisSettings(),
    predictor: RuntimePredictor | None = None,
    inflation: InflationHistory | None = None,
    promised_s: Mapping[str, float] | None = None,
) -> Findings:
    """The findings of one cycle on ``live``; with a ``predictor`` (learned from finished jobs)
    the advice plans with predicted runtimes and says so in its evidence, else with limits.
    With both and ``corrected_limits`` (the same jobs' ratios runtime / limit), a plan with bounds
    plans with history-corrected limits (``InflationHistory.bound``). ``promised_s``: the last
    cycle's ``Findings.first_promises`` (a very deep queue reads them)."""
    if not live.trusted:
        return Findings(trusted=False)
    snapshot = live.snapshot
    capacity = capacity_of(snapshot)
    pending = snapshot.pending
    mix = WorkloadMix.of_jobs(pending)
    valid_until = snapshot.time_s + settings.advice.validity_s
    planned = PlannedRuntimes(snapshot, predictor) if predictor is not None else None
    advice, head = advise_planned(
        snapshot,
        planned or estimate_runtime,
        mix=mix,
        settings=settings.advice,
        predicted=planned is not None,
        bound=_corrected(planned, inflation),
        promised_s=promised_s,
        overrun=predictor.overrun if predictor is not None else None,
    )
    promises = first_promises(promised_s or {}, head, pending)
    if planned is not None:
        advice = with_runtime_evidence(advice, planned)
    reclaim = reclaim_idle(live, settings.reclaim, valid_until)
    shared = share(live, settings.share, valid_until, frozenset(r.job_id for r in reclaim))
    found = advice + reclaim + shared
    missing = set(live.missing_nodes)
    if missing:
        found = tuple(
            r for r in found if r.kind in LOCAL_KINDS and not missing & set(r.node.split(","))
        )
    recommendations = tuple(sorted(found, key=lambda r: (-r.gain.gpus_busy_now, r.kind, r.job_id)))
    return Findings(
        trusted=True,
        recommendations=recommendations,
        gpus=snapshot.cluster.gpus,
        allocated_gpus=(capacity.total_milli - capacity.free_total_milli) / MILLI_PER_GPU,
        idle=split_idle(capacity, _waiting_shapes(pending)),
        fragmentation=measure(capacity, mix) if mix else None,
        pending_jobs=len(pending),
        running_jobs=len(snapshot.running),
        predictions=planned.summary if planned is not None else None,
        missing_nodes=live.missing_nodes,
        first_promises=tuple(sorted(promises.items())),
    )
