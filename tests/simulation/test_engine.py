"""The engine on a tiny, hand-checked trace (one node, four GPUs)."""

from __future__ import annotations

import pytest

from gpuadvisor.analysis.scheduling.buckets import END, PendingBuckets
from gpuadvisor.errors import ModelError
from gpuadvisor.model import Job
from gpuadvisor.simulation.engine import SimulationConfig, prepare_jobs, simulate
from tests.builders import make_cluster, make_job

# j0 holds 2 of 4 GPUs for 100 s; j1 needs all 4 (the head that blocks); j2 is short and
# small; j3 is long and needs 2.
TINY = [
    make_job("j0", at=0, gpus=2, runtime=100),
    make_job("j1", at=0, gpus=4, runtime=50),
    make_job("j2", at=1, gpus=1, runtime=30),
    make_job("j3", at=2, gpus=2, runtime=200),
]
CLUSTER = make_cluster(1, 4)


def waits(order: str) -> list[float]:
    return simulate(TINY, CLUSTER, SimulationConfig(order=order)).waits_s


def test_strict_fifo_lets_the_head_block_everything_behind_it() -> None:
    assert waits("fifo") == [0, 100, 149, 148]


def test_easy_backfills_only_what_ends_before_the_heads_reservation() -> None:
    # j2 ends at 31 < 100 (the head's reservation); j3 would run past it on reserved GPUs.
    assert waits("easy") == [0, 100, 0, 148]


def test_advisor_matches_easy_here_and_never_delays_the_head() -> None:
    assert waits("advisor") == [0, 100, 0, 148]


def test_fifo_skip_starves_the_big_job() -> None:
    assert waits("fifo-skip") == [0, 231, 0, 29]


def test_conservative_reserves_for_every_blocked_job() -> None:
    assert waits("conservative") == [0, 100, 0, 148]


def test_sjf_runs_the_shortest_first() -> None:
    # t=0: j1 (50 s) sorts before j0 (100 s) and takes all 4 GPUs; at 50, j2 (30 s) and j0
    # start; at 80, j2's GPU frees and j3 fits.
    assert waits("sjf") == [50, 0, 49, 78]


def test_golden_metrics_for_strict_fifo() -> None:
    m = simulate(TINY, CLUSTER, SimulationConfig(order="fifo")).metrics()
    # Arrival window [0, 2]: 2 of 4 GPUs busy.
    assert m["allocation_ratio"] == pytest.approx(0.5)
    # Busy window [0, 350]: 2x100 + 4x50 + 3x30 + 2x170 = 830 GPU-s of 1400.
    assert m["allocation_ratio_busy"] == pytest.approx(830 / 1400)
    # [0,1): only j1 (4 GPUs) waits with 2 free: capacity shortfall 2.
    # [1,2): j2 fits in 1 of the 2 free GPUs: ordering loss 1, shortfall 1.
    assert m["ordering_loss_ratio"] == pytest.approx(1 / 8)
    assert m["fragmentation_loss_ratio"] == pytest.approx(0.0)
    assert m["capacity_shortfall_ratio"] == pytest.approx(3 / 8)
    assert m["idle_while_waiting_ratio"] == pytest.approx(4 / 8)
    assert m["wait_max_s"] == 149
    assert m["wait_mean_s"] == pytest.approx((0 + 100 + 149 + 148) / 4)
    assert m["makespan_s"] == 350
    assert m["jobs"] == 4
    by_size = m["wait_by_size"]
    assert isinstance(by_size, dict)
    assert by_size["4"]["wait_max_s"] == 100
    assert by_size["2"]["jobs"] == 2


def test_starvation_is_measured_against_fifo() -> None:
    fifo = simulate(TINY, CLUSTER, SimulationConfig(order="fifo"))
    skip = simulate(TINY, CLUSTER, SimulationConfig(order="fifo-skip")).metrics(fifo.waits_s)
    assert skip["delta_wait_vs_fifo_max_s"] == 131  # j1: 231 instead of 100


def test_fragmentation_loss_when_free_gpus_are_scattered() -> None:
    # Two nodes of 4 GPUs, 3 busy on each for a long time; a 2-GPU job waits although
    # 2 GPUs are free: one on each node. Window [0, 40]; 'pair' waits over [20, 40).
    jobs = [
        make_job("a", at=0, gpus=3, runtime=1000),
        make_job("b", at=0, gpus=3, runtime=1000),
        make_job("pair", at=20, gpus=2, runtime=10),
        make_job("tail", at=40, gpus=8, runtime=1),
    ]
    result = simulate(jobs, make_cluster(2, 4), SimulationConfig(order="fifo"))
    m = result.metrics()
    assert m["fragmentation_loss_ratio"] == pytest.approx(2 * 20 / (8 * 40))
    assert m["ordering_loss_ratio"] == 0
    assert m["capacity_shortfall_ratio"] == 0


def test_multi_node_jobs_are_gang_allocated_on_whole_nodes() -> None:
    jobs = [make_job("wide", at=0, gpus=16, runtime=10), make_job("one", at=0, gpus=1)]
    result = simulate(jobs, make_cluster(3, 8), SimulationConfig(order="fifo"))
    wide = result.allocations[0]
    assert wide is not None
    assert len(wide.parts) == 2
    assert all(len(gpus) == 8 for _, gpus in wide.parts)
    assert result.waits_s == [0, 0]


def test_jobs_too_big_for_the_cluster_are_rejected_not_simulated() -> None:
    runnable, rejected = prepare_jobs(
        [make_job("ok", gpus=8), make_job("huge", gpus=64)], make_cluster(2, 8)
    )
    assert [j.job_id for j in runnable] == ["ok"]
    assert [j.job_id for j in rejected] == ["huge"]


def test_a_replay_needs_runtimes() -> None:
    with pytest.raises(ModelError, match="no runtime"):
        simulate([Job("x", 0, None, 1)], CLUSTER, SimulationConfig())


def test_unknown_policy_names_are_refused_with_the_choices() -> None:
    with pytest.raises(ModelError, match="choose from fifo"):
        SimulationConfig(order="lifo")


def test_snapshot_at_an_instant_shows_who_runs_and_who_waits() -> None:
    result = simulate(TINY, CLUSTER, SimulationConfig(order="fifo"))
    snap = result.snapshot_at(50)
    assert [r.job.job_id for r in snap.running] == ["j0"]
    assert [j.job_id for j in snap.pending] == ["j1", "j2", "j3"]


def test_the_advisor_places_short_jobs_with_the_long_ones() -> None:
    # a (50 s) lands on node 0, b (1000 s) on node 1. c (100 s) would keep node 0 from being
    # whole 40 s longer; on node 1 it ends first. Strict first-fit puts it on node 0.
    jobs = [
        make_job("a", at=0, gpus=3, runtime=50),
        make_job("b", at=0, gpus=3, runtime=1000),
        make_job("c", at=10, gpus=1, runtime=100),
    ]
    cluster = make_cluster(2, 4)
    advisor = simulate(jobs, cluster, SimulationConfig(order="advisor"))
    assert [a.nodes if a else None for a in advisor.allocations] == [(0,), (1,), (1,)]
    easy = simulate(jobs, cluster, SimulationConfig(order="easy"))
    assert [a.nodes if a else None for a in easy.allocations] == [(0,), (1,), (0,)]


def test_a_node_is_busy_until_its_remaining_jobs_end() -> None:
    # e asks for 1000 s but ends at 100; f (300 s) joins it on node 0, g (2000 s) takes node
    # 1. Once e is gone node 0 is busy until 300 only, so h (500 s) goes to node 1.
    jobs = [
        make_job("e", at=0, gpus=2, runtime=100, limit=1000),
        make_job("f", at=0, gpus=2, runtime=300),
        make_job("g", at=0, gpus=2, runtime=2000),
        make_job("h", at=150, gpus=1, runtime=500),
    ]
    result = simulate(jobs, make_cluster(2, 4), SimulationConfig(order="advisor"))
    assert [a.nodes if a else None for a in result.allocations] == [(0,), (0,), (1,), (1,)]


def test_pending_buckets_keep_the_queue_and_its_buckets_in_step() -> None:
    queue = PendingBuckets()
    a, b, c = make_job("a", gpus=1), make_job("b", gpus=1), make_job("c", gpus=2)
    queue.add((2.0, 0.0, 1), b, "x")
    queue.add((1.0, 0.0, 0), a, "x")
    queue.add((3.0, 0.0, 2), c, "y")
    assert [j.job_id for j in queue.jobs] == ["a", "b", "c"]
    assert (len(queue), queue.buckets, len(queue.by_shape)) == (3, 2, 2)
    assert [j.job_id for j in queue.by_shape[a.fit_key].buckets["x"].jobs] == ["a", "b"]
    assert queue.remove((1.0, 0.0, 0), "x") is a
    assert queue.remove((3.0, 0.0, 2), "y") is c
    assert (len(queue), queue.buckets, list(queue.by_shape)) == (1, 1, [b.fit_key])
    assert queue.key_at(0) == (2.0, 0.0, 1)
    assert queue.key_at(1) == END
    with pytest.raises(KeyError):
        queue.remove((9.0, 0.0, 9), "x")


@pytest.mark.parametrize("order", ["easy", "advisor"])
def test_a_replay_without_timeline_decides_the_same_and_records_no_points(order: str) -> None:
    drawn = simulate(TINY, CLUSTER, SimulationConfig(order=order))
    bare = simulate(TINY, CLUSTER, SimulationConfig(order=order, timeline=False))
    assert drawn.timeline and bare.timeline == ()
    assert (bare.start_s, bare.end_s, bare.allocations, bare.overtook) == (
        drawn.start_s,
        drawn.end_s,
        drawn.allocations,
        drawn.overtook,
    )
    assert bare.totals == drawn.totals
    assert bare.metrics(None) == drawn.metrics(None)
