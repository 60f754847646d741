"""The rules of ``PodHistory`` on series as kube-state-metrics writes them, for the cases the
real-server test (tests/cli/test_whatif_from_prometheus.py) does not reach: series without ``uid``
(told apart by ``namespace/pod``), pods still pending or running when the read ends, a pod that
failed before it started, and a node cordoned and not ready at once (counted once)."""

from __future__ import annotations

from pathlib import Path

from gpuadvisor.sources.prometheus.answers import Series
from gpuadvisor.sources.prometheus.history.podhistory import SERIES_READ, PodHistory

STEP = 10.0
END = 10_000.0
UID_A, UID_B, UID_C, UID_1 = (f"0d5c7a4e-1f2b-4c3d-9e8f-00000000000{n}" for n in "abc1")


def series(labels: dict[str, str], *points: tuple[float, float]) -> Series:
    return Series.of(labels, points)


def every(start: float, stop: float, value: float = 1.0) -> tuple[tuple[float, float], ...]:
    out, t = [], start
    while t < stop:
        out.append((t, value))
        t += STEP
    return tuple(out)


def pod_labels(name: str, **more: str) -> dict[str, str]:
    return {"namespace": "ns", "pod": name, **more}


def history_of(*pods: tuple[str, str, tuple[float, float], float | None]) -> PodHistory:
    """Pods as (name, phase while seen, (first, last) seen, start time or None), 2 GPUs each,
    in series without ``uid``."""
    history = PodHistory()
    history.add_gpu_requests(
        [
            series(pod_labels(n, container="c", resource="nvidia_com_gpu"), (0.0, 2.0))
            for n, *_ in pods
        ]
    )
    history.add_active_phases(
        [series(pod_labels(n, phase=phase), *every(*span)) for n, phase, span, _ in pods]
    )
    history.add_values(
        "start", [series(pod_labels(n), (0.0, start)) for n, _, _, start in pods if start]
    )
    return history


def test_pods_without_uid_are_told_by_namespace_and_name_and_unfinished_ones_are_kept_apart() -> (
    None
):
    history = history_of(
        ("pending", "Pending", (100.0, END), None),
        ("running", "Running", (200.0, END), 200.0),
        ("gone", "Pending", (300.0, 900.0), None),
        ("ran", "Running", (400.0, 2000.0), 400.0),
    )
    jobs, left_out = history.finished(END)
    assert left_out == {}
    got = {j.job_id: (j.state, j.start_time_s, j.end_time_s) for j in jobs}
    assert got == {
        "ns/pending": ("PENDING", None, None),  # still waiting: not demand that left
        "ns/running": (
            "RUNNING",
            200.0,
            None,
        ),  # still running: no end (replayed up to the read end)
        "ns/gone": ("CANCELLED", None, 900.0 - STEP),  # its last pending sample
        "ns/ran": ("ENDED", 400.0, 2000.0 - STEP),  # its last running sample
    }
    assert all(j.job.user == "ns" and j.job.total_gpus == 2 for j in jobs)


def test_a_pod_failed_before_it_started_left_the_queue_as_failed() -> None:
    history = history_of(("rejected", "Pending", (100.0, 500.0), None))
    history.add_final_phases([series(pod_labels("rejected", phase="Failed"), (600.0, 1.0))])
    (job,), _ = history.finished(END)
    assert (job.state, job.start_time_s, job.end_time_s) == ("FAILED", None, 500.0 - STEP)


def test_a_gpu_pod_never_seen_in_a_phase_is_left_out_by_reason() -> None:
    history = PodHistory()
    labels = pod_labels("ghost", uid=UID_1, container="c", resource="nvidia_com_gpu")
    history.add_gpu_requests([series(labels, (0.0, 1.0))])
    assert history.finished(END) == ([], {"no kube_pod_status_phase series": 1})


def test_a_node_cordoned_and_not_ready_at_once_counts_its_gpus_missing_once() -> None:
    history = PodHistory()
    history.add_allocatable(
        [series({"node": "k1", "resource": "nvidia_com_gpu"}, *every(0, END, 8.0))]
    )
    history.add_node_flags(
        [series({"node": "k1"}, *every(0, 1000, 0.0), *every(1000, 3000), *every(3000, END, 0.0))],
        unavailable_when=1.0,
    )
    ready = every(0, 2000) + every(2000, 4000, 0.0) + every(4000, END)
    history.add_node_flags([series({"node": "k1"}, *ready)], unavailable_when=0.0)
    capacity = history.capacity(0.0, END)
    # cordoned 1000-3000, not ready 2000-4000: 8 GPUs missing 1000-4000, once
    assert history.node_gpus == {"k1": 8}
    assert capacity["missing_gpu_s"] == 8 * 3000.0
    assert capacity["cluster_gpu_s"] == 8 * END


def test_each_chunk_names_only_the_gpu_pods_alive_in_it() -> None:
    """The phase reads name the pods whose request was read in a chunk that may overlap: a
    chunk costs the GPU pods alive in it, not every pod of the window."""
    history = PodHistory()
    requests = [
        series({"uid": uid, "container": "c"}, (stamp, 1.0))
        for uid, stamps in ((UID_A, (100, 200)), (UID_B, (200, 300)), (UID_C, (400,)))
        for stamp in stamps
    ]
    history.add_gpu_requests(requests)
    selectors = history.phase_selectors(100.0)
    assert selectors is not None
    named = [selectors(lo, lo + 100.0) for lo in (0.0, 100.0, 200.0, 300.0, 400.0)]
    uids = [[s.split('uid=~"')[1].rstrip('"}') for s in chunk] for chunk in named]
    assert uids == [[UID_A], [f"{UID_A}|{UID_B}"], [UID_B], [UID_C], []]
    assert named[0] == [f'kube_pod_status_phase{{phase=~"Pending|Running|Unknown",uid=~"{UID_A}"}}']


def test_pods_without_uid_have_their_phases_read_unfiltered() -> None:
    history = history_of(("p", "Pending", (100.0, 200.0), None))
    assert history.phase_selectors(100.0) is None


def test_every_series_read_is_named_in_the_docs() -> None:
    docs = (Path(__file__).resolve().parents[3] / "docs" / "whatif.md").read_text()
    section = " ".join(docs[docs.index("### Kubernetes") :].split())
    for selector in SERIES_READ:
        assert f"`{selector.split('{')[0]}" in section, selector


def test_pods_with_a_uid_or_name_of_the_wrong_shape_are_left_out_and_counted() -> None:
    """A ``uid`` goes into the phase queries' ``uid=~`` matchers: one like ``.*`` would read
    every pod's phases, ``a"}`` would break the query. Kubernetes enforces both shapes; a
    series that breaks them does not come from it."""
    history = PodHistory()
    gpu = {"container": "c", "resource": "nvidia_com_gpu"}
    history.add_gpu_requests(
        [
            series({"uid": ".*", **pod_labels("a"), **gpu}, (0.0, 1.0)),
            series({"uid": 'x"}', **pod_labels("b"), **gpu}, (0.0, 1.0)),
            series({"uid": 'x"}', **pod_labels("b"), **gpu, "container": "d"}, (0.0, 1.0)),
            series(pod_labels("<!channel>", **gpu), (0.0, 1.0)),
            series({"uid": UID_A, **pod_labels("good"), **gpu}, (0.0, 1.0)),
        ]
    )
    assert list(history.pods) == [UID_A]
    selectors = history.phase_selectors(100.0)
    assert selectors is not None and all(UID_A in s for s in selectors(0.0, 100.0))
    _, left_out = history.finished(END)
    assert left_out["uid or name of the wrong shape"] == 3
