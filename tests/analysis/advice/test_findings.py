"""One advisor cycle on the recorded head-of-line scenario: findings, reclaim-idle, and no
findings at all from untrusted inputs."""

from __future__ import annotations

from gpuadvisor.analysis.advice.findings import analyse
from gpuadvisor.analysis.advice.reclaim import ReclaimSettings, reclaim_idle
from gpuadvisor.model import GpuUse, Kind, LiveState, SourceHealth
from tests.analysis.advice.test_advice import head_of_line_snapshot

UP = (SourceHealth("prometheus", True), SourceHealth("agents", True), SourceHealth("queue", True))


def uses(job: str, gpus: range, idle: float | None) -> tuple[GpuUse, ...]:
    return tuple(GpuUse("vm", g, f"GPU-{g}", job, idle_ratio=idle) for g in gpus)


def live(*gpu_use: GpuUse, sources: tuple[SourceHealth, ...] = UP) -> LiveState:
    return LiveState(head_of_line_snapshot(), gpu_use, sources)


def test_the_cycle_finds_the_backfill_and_splits_the_idle_gpus() -> None:
    findings = analyse(live())
    assert findings.trusted
    kinds = [(r.kind, r.job_id) for r in findings.recommendations]
    assert (Kind.START_NOW, "5") in kinds
    assert (Kind.QUEUE_BLOCKED, "3") in kinds
    assert findings.gpus == 8 and findings.allocated_gpus == 6
    assert findings.pending_jobs == 3 and findings.running_jobs == 2
    assert findings.idle is not None
    # jobs 4 and 5 would fill the 2 free GPUs: both are ordering loss
    assert findings.idle.ordering_milli == 2000
    assert findings.idle.fragmentation_milli == findings.idle.capacity_milli == 0
    assert findings.fragmentation is not None
    # job 5 makes 2 GPUs busy: 2 of 8
    assert findings.expected_gain_ratio == 0.25


def test_untrusted_inputs_give_no_numbers_and_no_advice() -> None:
    stale = (SourceHealth("prometheus", True), SourceHealth("queue", False, "scrape 300s old"))
    findings = analyse(live(sources=stale))
    assert not findings.trusted
    assert findings.recommendations == () and findings.idle is None
    assert findings.expected_gain_ratio == 0.0


def test_a_job_idle_on_all_its_gpus_is_reported_with_the_waiting_demand() -> None:
    state = live(*uses("1", range(4), 0.97), *uses("2", range(4, 6), None))
    (rec,) = reclaim_idle(state, ReclaimSettings(), valid_until_s=700.0)
    assert rec.kind is Kind.RECLAIM_IDLE and rec.job_id == "1" and rec.node == "vm"
    assert rec.commands == ()  # advisory only: the advisor never ends a job
    assert rec.gain.gpus_busy_now == 4  # 11 GPUs wait, 4 could be freed
    assert "idle 97%" in rec.action and "3 waiting job(s) need 11 GPU(s)" in rec.action
    assert dict(rec.evidence)["idle_gpus"] == "4"


def test_a_job_that_uses_some_of_its_gpus_is_left_alone() -> None:
    state = live(*uses("1", range(3), 0.99), *uses("1", range(3, 4), 0.2))
    assert reclaim_idle(state, ReclaimSettings(), valid_until_s=0.0) == ()


def test_reclaim_findings_join_the_cycle() -> None:
    findings = analyse(live(*uses("1", range(4), 0.95)))
    assert any(r.kind is Kind.RECLAIM_IDLE for r in findings.recommendations)
