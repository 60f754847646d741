"""Job ids and pod names in Prometheus labels are untrusted (issue 17, item 2): a series whose
id is not a job id (``model.ids``) is left out of the live state and counted as ``bad-id``,
never passed on to advice, chat or alerts."""

from __future__ import annotations

import pytest

from tests.sources.prometheus.test_live_state import (
    T0,
    agent,
    build,
    dcgm,
    head_of_line,
    job,
    kube,
    merge,
    pod,
)

HOSTILE = [
    "<!channel>",
    "<https://evil.example|click>",
    "77 OR 1",
    "x" * 129,
    "a\nb",
    "\u202e1",
]


@pytest.mark.parametrize("job_id", HOSTILE)
def test_a_queue_job_with_a_bad_id_is_left_out_and_counted(job_id: str) -> None:
    built = build(merge(head_of_line(), job(job_id, "PENDING", 1, T0)))
    assert [j.job_id for j in built.state.snapshot.pending] == ["3", "4", "5"]
    (warning,) = built.warnings
    assert warning.reason == "bad-id"
    assert "gpuadvisor_queue_job_info" in warning.detail
    assert str(warning).isascii() and "\n" not in str(warning) and len(str(warning)) < 400
    assert built.state.trusted


def test_an_agent_series_with_a_bad_job_id_is_left_out_and_counted() -> None:
    answers = head_of_line(jobs={0: "1", 1: "1", 2: "1", 3: "1", 4: "2", 5: "2"})
    answers = merge(answers, {"gpu_jobs": agent("vm", 8, {7: "<!here>"})["gpu_jobs"]})
    built = build(answers)
    assert [(w.reason, w.subject) for w in built.warnings] == [("bad-id", "job '<!here>'")]
    assert all("<!here>" not in r.job.job_id for r in built.state.snapshot.running)


def test_slurm_shapes_and_the_charset_pass() -> None:
    answers = merge(
        head_of_line(),
        job("77_3", "PENDING", 1, T0 + 50),
        job("78+1", "PENDING", 1, T0 + 51),
        job("pbs.42:a-b", "PENDING", 1, T0 + 52),
    )
    built = build(answers)
    assert built.warnings == ()
    assert {"77_3", "78+1", "pbs.42:a-b"} <= {j.job_id for j in built.state.snapshot.pending}


def test_kubernetes_pods_with_bad_names_are_left_out_and_counted() -> None:
    built = kube(
        pod("ml", "train-0", "Running", 4, T0, node="gpu-a"),
        pod("ml", "<!channel>", "Pending", 2, T0 + 30),
        pod("Bad NS", "x", "Pending", 2, T0 + 30),
        pod("ml", "a|b", "Running", 1, T0, node="gpu-a"),
        dcgm({**dict.fromkeys(range(4, 8), ("ml", "train-0")), 0: ("ml", "a|b")}),
    )
    assert {(w.reason, w.subject) for w in built.warnings} == {
        ("bad-id", "pod 'ml'/'<!channel>'"),
        ("bad-id", "pod 'Bad NS'/'x'"),
        ("bad-id", "pod 'ml'/'a|b'"),  # from kube-state-metrics and from dcgm-exporter
    }
    assert [j.job_id for j in built.state.snapshot.pending] == []
    assert {r.job.job_id for r in built.state.snapshot.running} == {"ml/train-0"}
