"""Share advice on hand-built states: which jobs are light, how they pack, which mechanism,
which waiting jobs the freed GPUs start; and properties of the packing on random states."""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuadvisor.analysis.advice.findings import AnalysisSettings, analyse
from gpuadvisor.analysis.advice.mig import fits_one_gpu, profiles_for, smallest_fit
from gpuadvisor.analysis.advice.pack import ShareSettings, share
from gpuadvisor.model import (
    ClusterSnapshot,
    GpuLoad,
    GpuUse,
    Kind,
    LiveState,
    RunningJob,
    Severity,
    SourceHealth,
)
from gpuadvisor.sinks.delivery.alertmanager import ALERTNAMES
from gpuadvisor.sinks.delivery.payload import recommendation_json
from gpuadvisor.sinks.exposition.advisor import AdvisorStatus, render_status
from tests.builders import GIB, gpu_uses, make_job, make_load, on, single_node
from tests.sinks.delivery.test_sink_webhook import schema as webhook_schema
from tests.sinks.delivery.test_sink_webhook import schema_problems

UP = (SourceHealth("prometheus", True), SourceHealth("agents", True), SourceHealth("queue", True))
HEAVY = make_load(0.9, p95=1.0, memory_gib=60)


def state(
    running: Mapping[str, tuple[int, ...]],
    loads: Mapping[str, GpuLoad],
    pending: tuple[int, ...] = (),
    gpus: int = 8,
) -> LiveState:
    """One node ``n`` of ``gpus`` GPUs; ``running`` job → GPU indices; pending job sizes."""
    cluster = single_node(gpus, "n")
    jobs = [
        RunningJob(make_job(j, gpus=len(g), runtime=None, limit=3600), 0.0, on(0, *g))
        for j, g in running.items()
    ]
    waiting = tuple(
        make_job(100 + k, at=10.0 + k, gpus=size, runtime=None, limit=600)
        for k, size in enumerate(pending)
    )
    use = tuple(u for j, g in running.items() for u in gpu_uses("n", j, g, loads[j]))
    return LiveState(ClusterSnapshot(1000.0, cluster, tuple(jobs), waiting), use, UP)


def test_four_light_jobs_pack_onto_one_gpu_and_start_the_waiting_job() -> None:
    light = make_load(0.1, p95=0.12, memory_gib=6)
    live = state(
        {"11": (0,), "12": (1,), "13": (2,), "14": (3,), "15": (4, 5)},
        {"11": light, "12": light, "13": light, "14": light, "15": HEAVY},
        pending=(3,),
    )
    (rec,) = share(live, ShareSettings(), valid_until_s=1120.0)
    evidence = dict(rec.evidence)
    assert rec.kind is Kind.SHARE and rec.job_id == "11,12,13,14" and rec.node == "n"
    assert evidence["gpus_freed"] == "3" and evidence["freed_gpu_indices"] == "1,2,3"
    # 6 GiB peak and 12 % p95 fit H100 80 GB's 1g.10gb; four of them fit one GPU's slices
    assert evidence["mechanism"] == "mig"
    assert evidence["mig_profiles"] == "11:1g.10gb,12:1g.10gb,13:1g.10gb,14:1g.10gb"
    assert evidence["startable_jobs"] == "100"  # 2 free + 3 freed GPUs: the 3-GPU job starts
    assert rec.gain.gpus_busy_now == 3 and rec.severity is Severity.WARNING
    assert rec.commands == () and rec.valid_until_s == 1120.0
    assert "Interference risk low" in rec.action and "free 3 GPU(s)" in rec.action


def test_the_mechanism_follows_the_peaks() -> None:
    # p95 45 %: each needs 4 of 7 compute slices (4g.40gb; two are 8 > 7) but the peaks
    # fit side by side (2 × 45 % ≤ 100 %): MPS; three of them (135 %): time-slicing
    mid = make_load(0.2, p95=0.45, memory_gib=6)
    (rec,) = share(state({"1": (0,), "2": (1,)}, {"1": mid, "2": mid}), ShareSettings(), 0.0)
    assert dict(rec.evidence)["mechanism"] == "mps"
    assert "Interference risk medium" in rec.action
    three = {"1": (0,), "2": (1,), "3": (2,)}
    (rec,) = share(state(three, dict.fromkeys(three, mid)), ShareSettings(), 0.0)
    assert dict(rec.evidence)["mechanism"] == "time-slicing"
    assert dict(rec.evidence)["gpus_freed"] == "2"


def test_a_gpu_without_mig_is_shared_by_mps() -> None:
    l40 = make_load(0.1, p95=0.1, memory_gib=4, total_gib=48, model="NVIDIA L40S")
    (rec,) = share(state({"1": (0,), "2": (1,)}, {"1": l40, "2": l40}), ShareSettings(), 0.0)
    assert dict(rec.evidence)["mechanism"] == "mps" and "mig_profiles" not in dict(rec.evidence)


def test_heavy_jobs_and_jobs_with_one_heavy_gpu_are_left_alone() -> None:
    light = make_load(0.05)
    live = state({"1": (0,), "2": (1,), "3": (2, 3)}, {"1": light, "2": HEAVY, "3": light})
    live = LiveState(
        live.snapshot,
        (
            *gpu_uses("n", "1", (0,), light),
            *gpu_uses("n", "2", (1,), HEAVY),
            *gpu_uses("n", "3", (2,), light),
            *gpu_uses("n", "3", (3,), HEAVY),
        ),
        UP,
    )
    assert share(live, ShareSettings(), 0.0) == ()  # job 1 alone has nobody to share with


def test_each_threshold_makes_a_gpu_heavy() -> None:
    for load in (
        make_load(0.3, p95=0.3),  # mean at or over 25 %
        make_load(0.1, p95=0.6),  # p95 over 50 %
        make_load(0.1, memory_gib=40),  # peak memory at 50 % of 80 GiB
    ):
        live = state({"1": (0,), "2": (1,)}, {"1": load, "2": make_load(0.05)})
        assert share(live, ShareSettings(), 0.0) == (), load


def test_gpus_of_unknown_load_are_never_shared() -> None:
    live = state({"1": (0,), "2": (1,)}, {"1": make_load(0.05), "2": make_load(0.05)})
    unknown = tuple(GpuUse(u.node, u.gpu_index, u.gpu_uuid, u.job_id) for u in live.gpu_use)
    assert share(LiveState(live.snapshot, unknown, UP), ShareSettings(), 0.0) == ()


def test_two_gpu_jobs_pack_gpu_by_gpu_and_never_onto_themselves() -> None:
    light = make_load(0.1, p95=0.12)
    live = state({"1": (0, 1), "2": (2, 3)}, {"1": light, "2": light})
    (rec,) = share(live, ShareSettings(), 0.0)
    assert dict(rec.evidence)["freed_gpu_indices"] == "2,3"


def test_reclaimed_jobs_are_not_shared_and_the_cycle_carries_share() -> None:
    light = make_load(0.1, p95=0.12)
    live = state({"1": (0,), "2": (1,)}, {"1": light, "2": light}, pending=(7,))
    assert share(live, ShareSettings(), 0.0, exclude=frozenset({"1"})) == ()
    findings = analyse(live, AnalysisSettings())
    (rec,) = [r for r in findings.recommendations if r.kind is Kind.SHARE]
    assert rec.valid_until_s == 1000.0 + AnalysisSettings().advice.validity_s
    # 6 free + 1 freed GPUs do not start the 7-GPU job... until they do: 7 ≤ 6 + 1
    assert dict(rec.evidence)["startable_jobs"] == "100"
    assert findings.expected_gain_ratio == 7 / 8


def test_a_job_that_fits_already_is_not_counted_as_started_by_sharing() -> None:
    light = make_load(0.1, p95=0.12)
    live = state({"1": (0,), "2": (1,)}, {"1": light, "2": light}, pending=(2,))
    (rec,) = share(live, ShareSettings(), 0.0)
    assert dict(rec.evidence)["startable_jobs"] == "" and rec.gain.gpus_busy_now == 0
    assert rec.severity is Severity.INFO and "no waiting job needs them now" in rec.action


def test_mig_tables_by_model_and_memory() -> None:
    assert [p.name for p in profiles_for("NVIDIA A100-SXM4-40GB", 40 * GIB)][:2] == [
        "1g.5gb",
        "1g.10gb",
    ]
    assert profiles_for("NVIDIA H200", 140.4 * GIB)[0].name == "1g.18gb"
    assert profiles_for("NVIDIA H100 NVL", 93.6 * GIB)[0].name == "1g.12gb"
    assert profiles_for("NVIDIA L40S", 48 * GIB) == ()
    assert profiles_for("NVIDIA A100", 16 * GIB) == ()  # no table near 16 GB
    h100 = profiles_for("NVIDIA H100 80GB HBM3", 80 * GIB)
    fit = smallest_fit(h100, 15 * GIB, 0.1)
    assert fit is not None and fit.name == "1g.20gb"
    fit = smallest_fit(h100, 5 * GIB, 0.3)
    assert fit is not None and fit.name == "3g.40gb"  # 7 × 30 % = 2.1 slices → 3
    assert smallest_fit(h100, 50 * GIB, 0.1) is None  # only the whole GPU holds 50 GiB
    assert fits_one_gpu([h100[3], h100[4]]) and not fits_one_gpu([h100[4], h100[4]])


LOADS = st.builds(
    lambda busy, p95, mem: make_load(busy, p95=max(busy, p95), memory_gib=mem),
    st.floats(0.0, 0.6),
    st.floats(0.0, 0.8),
    st.floats(0.0, 50.0),
)


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 3), min_size=0, max_size=6),
    loads=st.lists(LOADS, min_size=6, max_size=6),
    pending=st.lists(st.integers(1, 8), max_size=4),
)
def test_packing_properties(sizes: list[int], loads: list[GpuLoad], pending: list[int]) -> None:
    running: dict[str, tuple[int, ...]] = {}
    next_gpu = 0
    for k, size in enumerate(sizes):
        if next_gpu + size > 8:
            break
        running[str(k + 1)] = tuple(range(next_gpu, next_gpu + size))
        next_gpu += size
    live = state(running, {j: loads[int(j) - 1] for j in running}, tuple(pending))
    s = ShareSettings()
    recs = share(live, s, 0.0)
    assert recs == share(LiveState(live.snapshot, live.gpu_use[::-1], UP), s, 0.0)
    freed_total = 0
    seen: set[str] = set()
    for rec in recs:
        evidence = dict(rec.evidence)
        jobs = evidence["jobs"].split(",")
        assert len(jobs) >= 2 and not seen & set(jobs)
        seen |= set(jobs)
        for j in jobs:  # only jobs whose every GPU is light
            assert s.light(loads[int(j) - 1])
        assert float(evidence["packed_busy_mean"]) <= s.pack_busy_ratio + 1e-9
        freed = [int(i) for i in evidence["freed_gpu_indices"].split(",")]
        held = {g for j in jobs for g in running[j]}
        assert set(freed) <= held and len(freed) < len(held)
        freed_total += len(freed)
    started = sum(r.gain.gpus_busy_now for r in recs)
    assert started <= freed_total + 8 - next_gpu


def test_the_advisor_exposes_the_gpus_active_share_advice_would_free() -> None:
    light = make_load(0.1, p95=0.12)
    live = state({"1": (0,), "2": (1,), "3": (2,)}, dict.fromkeys("123", light))
    findings = analyse(live, AnalysisSettings())
    status = AdvisorStatus(findings, findings.recommendations, UP, 1000.0)
    values = {
        (s.name, tuple(s.labels.items())): s.value
        for family in render_status(status)
        for s in family.samples
    }
    assert values[("gpuadvisor_advisor_share_freeable_gpus", ())] == 2.0
    assert values[("gpuadvisor_advisor_recommendations", (("kind", "share"),))] == 1.0


def test_untrusted_inputs_give_no_share_advice() -> None:
    light = make_load(0.1, p95=0.12)
    live = state({"1": (0,), "2": (1,)}, {"1": light, "2": light})
    assert any(r.kind is Kind.SHARE for r in analyse(live).recommendations)
    stale = (*UP[:2], SourceHealth("queue", False, "scrape 300s old"))
    assert analyse(LiveState(live.snapshot, live.gpu_use, stale)).recommendations == ()


def test_share_can_be_switched_off() -> None:
    light = make_load(0.1, p95=0.12)
    live = state({"1": (0,), "2": (1,)}, {"1": light, "2": light})
    assert share(live, ShareSettings(enabled=False), 0.0) == ()


def test_share_advice_in_the_webhook_form_matches_the_schema_and_has_its_alertname() -> None:
    light = make_load(0.1, p95=0.12)
    live = state({"1": (0,), "2": (1,)}, {"1": light, "2": light}, pending=(7,))
    (rec,) = share(live, ShareSettings(), valid_until_s=2000.0)
    out = recommendation_json(rec)
    assert out["kind"] == "share" and out["commands"] == [] and out["command"] == ""
    assert out["evidence"]["gpus_freed"] == "1" and out["job_id"] == "1,2"
    root = webhook_schema()
    assert schema_problems(out, root["$defs"]["recommendation"], root) == []
    assert ALERTNAMES[Kind.SHARE] == "GpuAdvisorShare"
    assert set(ALERTNAMES) == set(Kind)  # every kind has its alert name
