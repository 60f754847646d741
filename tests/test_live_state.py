"""The pure builder from query answers to ``LiveState``: the Slurm head-of-line scenario of
../shared/fixtures as metric samples, GPU placement and its fallbacks, the scheduler's order,
source health, and inconsistent data left out with a counted reason instead of an exception."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from gpuadvisor.analysis.advice.reorder import advise
from gpuadvisor.analysis.estimates import estimate_runtime
from gpuadvisor.model import Kind, LiveState
from gpuadvisor.sources.prometheus.answers import Sample
from gpuadvisor.sources.prometheus.live.builders import GPUADVISOR_PLAN
from gpuadvisor.sources.prometheus.live.state import (
    Answers as Indexed,
)
from gpuadvisor.sources.prometheus.live.state import (
    LiveBuild,
    LiveSettings,
    build_gpuadvisor,
    build_kubernetes,
    build_live_state,
    prometheus_down,
)

NOW = 1_700_000_600.0
T0 = 1_700_000_000.0
MIN = 60.0

Answers = dict[str, list[Sample]]


def s(value: float, **labels: str) -> Sample:
    return Sample(dict(labels), value, NOW)


def agent(node: str, gpus: int, jobs: Mapping[int, str], *, group: int = 4) -> Answers:
    """One agent's answers: ``jobs`` maps GPU index to the job holding it."""
    uuid = [f"GPU-{node}-{i}" for i in range(gpus)]
    return {
        "node_gpus": [s(gpus, node=node)],
        "gpu_info": [
            s(
                1,
                node=node,
                gpu_uuid=uuid[i],
                gpu_index=str(i),
                name="NVIDIA H100",
                topology_group=f"numa{i // group}",
            )
            for i in range(gpus)
        ],
        "gpu_jobs": [s(1, gpu_uuid=uuid[i], job_id=j) for i, j in jobs.items()],
        "gpu_busy_ratio": [s(0.9 if i < 4 else 0.02, gpu_uuid=uuid[i]) for i in range(gpus)],
        "gpu_allocated_idle_ratio": [
            s(1.0 if i in jobs and i >= 4 else 0.0, gpu_uuid=uuid[i]) for i in range(gpus)
        ],
        "nvml_up": [s(1, instance=f"{node}:9835")],
        "agent_age_seconds": [s(3, node=node)],
    }


def job(
    job_id: str,
    state: str,
    gpus: int,
    submit: float,
    *,
    limit: float | None = None,
    start: float | None = None,
    nodes: Sequence[str] = (),
    priority: float = 100,
    user: str = "alice",
    gpu_indices: Mapping[str, Sequence[int]] | None = None,
) -> Answers:
    """One job as the queue exporter exposes it."""
    out: Answers = {
        "job_info": [s(1, job_id=job_id, user=user, partition="gpu", state=state)],
        "job_gpus": [s(gpus, job_id=job_id)],
        "job_nodes": [s(max(1, len(nodes)), job_id=job_id)],
        "job_submit_time": [s(submit, job_id=job_id)],
        "job_priority": [s(priority, job_id=job_id)],
        "job_node": [s(1, job_id=job_id, node=n) for n in nodes],
        "job_gpu": [
            s(1, job_id=job_id, node=n, gpu_index=str(i))
            for n, indices in (gpu_indices or {}).items()
            for i in indices
        ],
    }
    if limit is not None:
        out["job_time_limit"] = [s(limit, job_id=job_id)]
    if start is not None:
        out["job_start_time"] = [s(start, job_id=job_id)]
    return out


def queue_up(up: float = 1, age: float = 2) -> Answers:
    return {"queue_up": [s(up)], "queue_age_seconds": [s(age)]}


def merge(*parts: Answers) -> Answers:
    out: Answers = {}
    for part in parts:
        for name, samples in part.items():
            out.setdefault(name, []).extend(samples)
    return out


def head_of_line(**agent_jobs: Mapping[int, str]) -> Answers:
    """The recorded Slurm 22.05 scenario: node vm, 8 GPUs; jobs 1 (4 GPUs) and 2 (2 GPUs)
    run; job 3 (8 GPUs) heads the queue; 4 (1 GPU) and 5 (2 GPUs) wait behind it."""
    held = agent_jobs.get("jobs", {0: "1", 1: "1", 2: "1", 3: "1", 4: "2", 5: "2"})
    return merge(
        agent("vm", 8, held),
        queue_up(),
        job("1", "RUNNING", 4, T0, limit=120 * MIN, start=T0, nodes=["vm"]),
        job("2", "RUNNING", 2, T0 + 10, limit=60 * MIN, start=T0 + 10, nodes=["vm"]),
        job("3", "PENDING", 8, T0 + 20, limit=240 * MIN),
        job("4", "PENDING", 1, T0 + 30, limit=30 * MIN),
        job("5", "PENDING", 2, T0 + 40, limit=20 * MIN),
    )


def build(answers: Answers, max_age_s: float = 120.0) -> LiveBuild:
    return build_gpuadvisor(answers, now_s=NOW, max_age_s=max_age_s)


def allocation(state: LiveState, job_id: str) -> dict[str, tuple[int, ...]]:
    nodes = state.snapshot.cluster.nodes
    (running,) = [r for r in state.snapshot.running if r.job.job_id == job_id]
    return {nodes[n].name: gpus for n, gpus in running.allocation.parts}


def health(state: LiveState) -> dict[str, tuple[bool, str]]:
    return {h.source: (h.up, h.reason) for h in state.sources}


# --- the head-of-line scenario -------------------------------------------------------------------


def test_the_head_of_line_scenario_gives_the_snapshot_the_advice_needs() -> None:
    built = build(head_of_line())
    assert built.warnings == ()
    state = built.state
    assert state.trusted
    (node,) = state.snapshot.cluster.nodes
    assert (node.name, node.gpus, node.gpu_model) == ("vm", 8, "NVIDIA H100")
    assert node.topology_groups == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert allocation(state, "1") == {"vm": (0, 1, 2, 3)}
    assert allocation(state, "2") == {"vm": (4, 5)}
    assert [r.start_time_s for r in state.snapshot.running] == [T0, T0 + 10]
    pending = state.snapshot.pending
    assert [j.job_id for j in pending] == ["3", "4", "5"]
    head = pending[0]
    assert (head.gpus, head.time_limit_s, head.user) == (8, 240 * MIN, "alice")


def test_advice_on_the_built_snapshot_is_to_start_job_5_now() -> None:
    state = build(head_of_line()).state
    advice = advise(state.snapshot, estimate_runtime)
    starts = [r.job_id for r in advice if r.kind is Kind.START_NOW]
    assert starts in (["5"], ["4"], ["5", "4"], ["4", "5"])
    assert "5" in starts
    (blocked,) = [r for r in advice if r.kind is Kind.QUEUE_BLOCKED]
    assert blocked.job_id == "3"


def test_gpu_use_covers_each_allocated_gpu_with_its_ratios() -> None:
    state = build(head_of_line()).state
    use = {(u.node, u.gpu_index): u for u in state.gpu_use}
    assert sorted(use) == [("vm", i) for i in range(6)]
    assert use[("vm", 0)].job_id == "1" and use[("vm", 0)].utilization_ratio == 0.9
    assert use[("vm", 4)].gpu_uuid == "GPU-vm-4"
    assert (use[("vm", 5)].utilization_ratio, use[("vm", 5)].idle_ratio) == (0.02, 1.0)


def test_the_build_is_deterministic_whatever_the_sample_order() -> None:
    answers = head_of_line()
    shuffled = {name: list(reversed(samples)) for name, samples in reversed(answers.items())}
    assert build(answers) == build(shuffled)


# --- where running jobs sit ----------------------------------------------------------------------


def test_answers_indexed_one_by_one_as_they_arrive_build_the_same_state() -> None:
    raw = merge(
        head_of_line(),
        agent("vm2", 8, {0: "6", 1: "6"}),
        job("6", "RUNNING", 2, T0 + 50, limit=60 * MIN, start=T0 + 50, nodes=["vm2"]),
        job("7", "PENDING", 4, T0 + 60),
    )
    expected = build(raw)
    for order in (sorted(raw), sorted(raw, reverse=True)):
        answers = Indexed(GPUADVISOR_PLAN)
        for name in order:  # as read_live adds them, in whatever order they arrive
            answers.add(name, tuple(raw[name]))
        assert build_gpuadvisor(answers, now_s=NOW) == expected
    assert "job_info" in answers and "no_such_query" not in answers
    with pytest.raises(KeyError, match="read through its indexes only"):
        answers.get("job_info")  # its samples were let go once indexed
    assert answers.get("queue_up") == tuple(raw["queue_up"])  # unplanned: kept as it came


def test_the_schedulers_gpu_indices_are_used_when_no_agent_maps_jobs() -> None:
    answers = merge(
        agent("vm", 8, {}),
        queue_up(),
        job("7", "RUNNING", 2, T0, start=T0, nodes=["vm"], gpu_indices={"vm": [6, 7]}),
    )
    assert allocation(build(answers).state, "7") == {"vm": (6, 7)}


def test_without_indices_a_job_gets_the_lowest_free_ones_after_known_jobs() -> None:
    answers = merge(
        agent("vm", 8, {0: "9", 1: "9"}),
        queue_up(),
        job("8", "RUNNING", 3, T0, start=T0, nodes=["vm"]),  # listed first, placed after 9
        job("9", "RUNNING", 2, T0, start=T0, nodes=["vm"]),
    )
    state = build(answers).state
    assert allocation(state, "9") == {"vm": (0, 1)}
    assert allocation(state, "8") == {"vm": (2, 3, 4)}


def test_a_multi_node_job_holds_gpus_on_each_of_its_nodes() -> None:
    answers = merge(
        agent("a", 4, {0: "6", 1: "6"}),
        agent("b", 4, {}),
        queue_up(),
        job("6", "RUNNING", 2, T0, start=T0, nodes=["a", "b"]),
    )
    state = build(answers).state
    assert allocation(state, "6") == {"a": (0, 1), "b": (0, 1)}
    (running,) = state.snapshot.running
    assert (running.job.gpus, running.job.nodes) == (2, 2)


def test_gpus_an_agent_sees_held_by_a_job_the_queue_does_not_run_stay_held() -> None:
    answers = merge(agent("vm", 8, {6: "77", 7: "77"}), queue_up())
    built = build(answers)
    assert allocation(built.state, "77") == {"vm": (6, 7)}
    assert [w.reason for w in built.warnings] == ["not-in-queue"]


# --- inconsistent data is left out and counted ---------------------------------------------------


def test_a_running_job_on_a_node_no_agent_reports_is_left_out() -> None:
    answers = merge(head_of_line(), job("11", "RUNNING", 1, T0, start=T0, nodes=["gpu-99"]))
    built = build(answers)
    assert "11" not in [r.job.job_id for r in built.state.snapshot.running]
    (warning,) = built.warnings
    assert (warning.reason, warning.subject) == ("unknown-node", "job 11")
    assert "gpu-99" in str(warning)


def test_more_gpus_held_than_the_node_has_leaves_that_job_out() -> None:
    answers = merge(head_of_line(), job("12", "RUNNING", 4, T0, start=T0, nodes=["vm"]))
    built = build(answers)
    assert [r.job.job_id for r in built.state.snapshot.running] == ["1", "2"]
    (warning,) = built.warnings
    assert warning.reason == "over-capacity"
    assert "holds 4 GPUs on vm, which has 2 left" in warning.detail


def test_two_jobs_on_one_gpu_leave_the_second_out() -> None:
    answers = merge(
        agent("vm", 8, {}),
        queue_up(),
        job("1", "RUNNING", 1, T0, start=T0, nodes=["vm"], gpu_indices={"vm": [3]}),
        job("2", "RUNNING", 1, T0, start=T0, nodes=["vm"], gpu_indices={"vm": [3]}),
    )
    built = build(answers)
    assert [r.job.job_id for r in built.state.snapshot.running] == ["1"]
    assert [(w.reason, w.detail) for w in built.warnings] == [
        ("gpu-conflict", "GPU 3 on vm is held by job 1; left out")
    ]


def test_missing_and_bad_fields_are_warnings_not_exceptions() -> None:
    broken = job("20", "PENDING", 1, T0)
    del broken["job_gpus"]
    nan_gpus = job("21", "PENDING", 1, T0)
    nan_gpus["job_gpus"] = [s(float("nan"), job_id="21")]
    no_nodes = job("22", "RUNNING", 1, T0, start=T0)
    answers = merge(head_of_line(), broken, nan_gpus, no_nodes)
    built = build(answers)
    assert [j.job_id for j in built.state.snapshot.pending] == ["3", "4", "5"]
    assert [(w.reason, w.subject) for w in built.warnings] == [
        ("missing-field", "job 20"),
        ("bad-value", "job 21"),
        ("missing-field", "job 22"),
    ]
    assert str(built.warnings[0]) == "job 20: no job_gpus series; left out"


def test_a_missing_start_time_falls_back_to_the_submit_time() -> None:
    answers = merge(agent("vm", 8, {}), queue_up(), job("5", "RUNNING", 1, T0, nodes=["vm"]))
    built = build(answers)
    assert built.state.snapshot.running[0].start_time_s == T0
    assert [w.reason for w in built.warnings] == ["missing-field"]


def test_a_suspended_job_that_still_holds_its_node_keeps_its_gpus() -> None:
    answers = merge(
        agent("vm", 8, {}), queue_up(), job("40", "SUSPENDED", 2, T0, start=T0, nodes=["vm"])
    )
    assert allocation(build(answers).state, "40") == {"vm": (0, 1)}


def test_cpu_only_jobs_and_ended_jobs_are_not_gpu_work() -> None:
    answers = merge(
        head_of_line(),
        job("30", "PENDING", 0, T0),
        job("31", "COMPLETED", 1, T0),
        # As the queue exporter now exports jobs that ended: final state in lower case.
        job("32", "cancelled", 8, T0),
        job("33", "timeout", 2, T0, start=T0, limit=60),
    )
    built = build(answers)
    assert [j.job_id for j in built.state.snapshot.pending] == ["3", "4", "5"]
    assert built.warnings == ()


# --- the scheduler's order -----------------------------------------------------------------------


def test_pending_jobs_follow_priority_then_submit_time_then_job_id() -> None:
    answers = merge(
        agent("vm", 8, {}),
        queue_up(),
        job("10", "PENDING", 1, T0 + 5, priority=50),
        job("9", "PENDING", 1, T0 + 5, priority=50),
        job("8", "PENDING", 1, T0 + 1, priority=50),
        job("x", "PENDING", 1, T0 + 5, priority=50),
        job("7", "PENDING", 1, T0 + 9, priority=900),
    )
    assert [j.job_id for j in build(answers).state.snapshot.pending] == ["7", "8", "9", "10", "x"]


# --- source health -------------------------------------------------------------------------------


def test_no_answers_mean_every_source_but_prometheus_is_down_with_no_data() -> None:
    state = build({}).state
    assert health(state) == {
        "prometheus": (True, ""),
        "agents": (False, "no data"),
        "queue": (False, "no data"),
    }
    assert not state.trusted


def test_a_queue_exporter_that_cannot_read_the_scheduler_takes_the_queue_down() -> None:
    answers = merge(head_of_line(), {"queue_up": [s(0)]})
    up, reason = health(build(answers).state)["queue"]
    assert not up and "gpuadvisor_queue_up is 0" in reason


def test_a_stale_queue_is_down_with_its_age_and_the_limit() -> None:
    answers = head_of_line()
    answers["queue_age_seconds"] = [s(312)]
    state = build(answers).state
    assert health(state)["queue"] == (False, "scrape 312s old (limit 120s)")
    assert state.sources[2].age_s == 312


def test_one_stale_agent_leaves_its_node_out_while_the_others_stay_trusted() -> None:
    stale = agent("old", 8, {})
    stale["agent_age_seconds"] = [s(500, node="old")]
    built = build(merge(head_of_line(), stale))
    assert [n.name for n in built.state.snapshot.cluster.nodes] == ["vm"]
    assert health(built.state)["agents"] == (True, "")
    assert built.state.sources[1].age_s == 3
    assert [(w.reason, w.subject) for w in built.warnings] == [("stale", "node old")]


def test_every_agent_stale_takes_the_agents_down() -> None:
    answers = head_of_line()
    answers["agent_age_seconds"] = [s(500, node="vm")]
    up, reason = health(build(answers).state)["agents"]
    assert not up and "every agent is stale" in reason


def test_an_agent_without_nvml_is_named_in_a_warning() -> None:
    answers = merge(head_of_line(), {"nvml_up": [s(0, instance="gpu-7:9835")]})
    built = build(answers)
    assert [(w.reason, w.subject) for w in built.warnings] == [("nvml-down", "agent gpu-7:9835")]
    assert build({"nvml_up": [s(0, instance="a:1")]}).state.sources[1].reason == (
        "NVML down on every agent"
    )


def test_ratios_are_clamped_and_nan_is_unknown() -> None:
    answers = head_of_line()
    answers["gpu_busy_ratio"] = [
        s(1.03, gpu_uuid="GPU-vm-0"),
        s(float("nan"), gpu_uuid="GPU-vm-1"),
    ]
    use = {u.gpu_index: u.utilization_ratio for u in build(answers).state.gpu_use}
    assert (use[0], use[1], use[2]) == (1.0, None, None)


def test_prometheus_down_is_an_empty_untrusted_state_naming_the_error() -> None:
    state = prometheus_down("gpuadvisor", NOW, "HTTP 503 from Prometheus")
    assert state.snapshot.cluster.nodes == () and not state.trusted
    assert health(state) == {
        "prometheus": (False, "HTTP 503 from Prometheus"),
        "agents": (False, "not read: Prometheus failed"),
        "queue": (False, "not read: Prometheus failed"),
    }


# --- kubernetes ----------------------------------------------------------------------------------


def pod(ns: str, name: str, phase: str, gpus: int, created: float, node: str = "") -> Answers:
    key = {"namespace": ns, "pod": name}
    return {
        "pod_gpus": [s(gpus, **key)],
        "pod_phase": [s(1, **key, phase=phase)],
        "pod_info": [s(1, **key, node=node, created_by_kind="Job")],
        "pod_created": [s(created, **key)],
        "pod_start_time": [s(created + 5, **key)] if phase == "Running" else [],
    }


def dcgm(node_pods: Mapping[int, tuple[str, str]], gpus: int = 8, age: float = 2) -> Answers:
    rows, ages = [], []
    for i in range(gpus):
        ns, name = node_pods.get(i, ("", ""))
        attribution = {"namespace": ns, "pod": name, "container": "main"} if name else {}
        gpu = {"gpu": str(i), "UUID": f"GPU-{i}", "device": f"nvidia{i}"}
        host = {"modelName": "NVIDIA A100", "Hostname": "dcgm-exporter-x7k2p"}
        rows.append(s(0.5, **gpu, **host, **attribution))
        ages.append(s(age, UUID=f"GPU-{i}"))
    return {"gpu_utilization_ratio": rows, "gpu_utilization_age_seconds": ages}


def kube(*parts: Answers) -> LiveBuild:
    base: Answers = {"node_gpus": [s(8, node="gpu-a")], "ksm_age_seconds": [s(4)]}
    return build_kubernetes(merge(base, *parts), now_s=NOW)


def test_kubernetes_pods_become_running_and_pending_jobs() -> None:
    built = kube(
        pod("ml", "train-0", "Running", 4, T0, node="gpu-a"),
        pod("ml", "eval-1", "Pending", 2, T0 + 30),
        pod("ml", "big-2", "Pending", 8, T0 + 10),
        pod("research", "warm-3", "Pending", 2, T0 + 40, node="gpu-a"),  # bound: starting
        dcgm(dict.fromkeys(range(4, 8), ("ml", "train-0"))),
    )
    assert built.warnings == ()
    state = built.state
    assert health(state) == {
        "prometheus": (True, ""),
        "kube-state-metrics": (True, ""),
        "gpu-utilization": (True, ""),
    }
    assert allocation(state, "ml/train-0") == {"gpu-a": (4, 5, 6, 7)}
    assert allocation(state, "research/warm-3") == {"gpu-a": (0, 1)}
    assert [j.job_id for j in state.snapshot.pending] == ["ml/big-2", "ml/eval-1"]
    assert state.snapshot.pending[0].user == "ml"
    use = {u.gpu_index: (u.job_id, u.utilization_ratio, u.gpu_uuid) for u in state.gpu_use}
    assert use[4] == ("ml/train-0", 0.5, "GPU-4")
    assert use[0] == ("research/warm-3", None, "")


def test_kubernetes_without_dcgm_or_with_stale_kube_state_metrics_is_untrusted() -> None:
    built = build_kubernetes(
        {"node_gpus": [s(8, node="gpu-a")], "ksm_age_seconds": [s(400)]}, now_s=NOW
    )
    assert health(built.state) == {
        "prometheus": (True, ""),
        "kube-state-metrics": (False, "scrape 400s old (limit 120s)"),
        "gpu-utilization": (False, "no data"),
    }


def test_build_live_state_picks_the_builder_by_profile_kind() -> None:
    settings = LiveSettings(max_age_s=1.0)
    built = build_live_state("gpuadvisor", head_of_line(), now_s=NOW, settings=settings)
    assert health(built.state)["agents"] == (
        False,
        "every agent is stale or unusable (see warnings)",
    )


# --- the loads of the share advice ---------------------------------------------------------------


def loads(node: str, gpu: int, **values: float) -> Answers:
    """Answers of the share queries for GPU ``gpu`` of ``node``'s agent."""
    return {name: [s(v, gpu_uuid=f"GPU-{node}-{gpu}")] for name, v in values.items()}


def test_the_share_loads_prefer_sm_activity_and_need_every_part() -> None:
    total, peak = 80.0 * 1024**3, 6.0 * 1024**3
    answers = merge(
        head_of_line(),
        loads(
            "vm",
            0,
            gpu_sm_active_mean=0.1,
            gpu_sm_active_p95=0.3,
            gpu_busy_share_mean=0.5,
            gpu_busy_share_p95=0.9,
            gpu_memory_peak_bytes=peak,
            gpu_memory_total_bytes=total,
        ),
        # no SM activity (not Hopper): utilization; its p95 below its mean is raised to it
        loads(
            "vm",
            4,
            gpu_busy_share_mean=0.2,
            gpu_busy_share_p95=0.1,
            gpu_memory_peak_bytes=peak,
            gpu_memory_total_bytes=total,
        ),
        # no memory peak: no load, so never advised to share
        loads("vm", 5, gpu_busy_share_mean=0.2, gpu_busy_share_p95=0.3),
    )
    use = {u.gpu_index: u.load for u in build(answers).state.gpu_use}
    first = use[0]
    assert first is not None and first.sm_active and first.model == "NVIDIA H100"
    assert (first.busy_mean_ratio, first.busy_p95_ratio) == (0.1, 0.3)
    assert (first.memory_peak_bytes, first.memory_total_bytes) == (peak, total)
    fourth = use[4]
    assert fourth is not None and not fourth.sm_active
    assert (fourth.busy_mean_ratio, fourth.busy_p95_ratio) == (0.2, 0.2)
    assert use[1] is None and use[5] is None


def test_kubernetes_share_loads_come_from_dcgm_by_uuid_with_its_model_name() -> None:
    mib = 1024.0**2
    loads_of = {
        "gpu_sm_active_mean": [s(0.1, UUID="GPU-4", modelName="NVIDIA A100-SXM4-80GB")],
        "gpu_sm_active_p95": [s(0.2, UUID="GPU-4")],
        "gpu_busy_share_mean": [s(0.3, UUID=f"GPU-{i}", modelName="NVIDIA A100") for i in (4, 5)],
        "gpu_busy_share_p95": [s(0.4, UUID=f"GPU-{i}") for i in (4, 5)],
        "gpu_memory_peak_bytes": [s(6000 * mib, UUID=f"GPU-{i}") for i in (4, 5)],
        "gpu_memory_total_bytes": [s(81000 * mib, UUID=f"GPU-{i}") for i in (4, 5, 6)],
    }
    built = kube(
        pod("ml", "train-0", "Running", 4, T0, node="gpu-a"),
        dcgm(dict.fromkeys(range(4, 8), ("ml", "train-0"))),
        loads_of,
    )
    use = {u.gpu_index: u.load for u in built.state.gpu_use}
    sm = use[4]
    assert sm is not None and sm.sm_active and sm.model == "NVIDIA A100-SXM4-80GB"
    assert (sm.busy_mean_ratio, sm.busy_p95_ratio, sm.memory_total_bytes) == (0.1, 0.2, 81000 * mib)
    util = use[5]
    assert util is not None and not util.sm_active and util.model == "NVIDIA A100"
    assert (util.busy_mean_ratio, util.busy_p95_ratio) == (0.3, 0.4)
    assert use[6] is None and use[7] is None  # no activity or no memory peak: no load
