"""The simulator's GPU-sharing model: light jobs pack onto one GPU under a mode, heavy jobs never
share, co-located jobs pay the interference slowdown, and ``off`` replays as before."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuadvisor.errors import ModelError
from gpuadvisor.model import MILLI_PER_GPU, Cluster, Job
from gpuadvisor.simulation.engine import SimulationConfig, simulate
from gpuadvisor.simulation.generator import LIGHT_USAGE, generate_workload
from gpuadvisor.simulation.habits import generate_habitual_workload
from gpuadvisor.simulation.results import SimulationResult
from gpuadvisor.simulation.sharing import SHARE_MODES, Sharing
from tests.builders import make_cluster, make_job

ONE_GPU = make_cluster(1, 1)


def light(job_id: str, *, at: float = 0.0, runtime: float = 100.0, usage: int = 300) -> Job:
    """A whole one-GPU job that uses ``usage`` milli of its GPU."""
    return replace(make_job(job_id, at=at, runtime=runtime), usage_milli=usage)


def run(
    jobs: list[Job], cluster: Cluster, mode: str, slowdown: float | None = None
) -> SimulationResult:
    sharing = Sharing(mode, slowdown=slowdown)
    return simulate(jobs, cluster, SimulationConfig(order="fifo", sharing=sharing))


# -- hand-built cases ---------------------------------------------------------------------------


def test_two_light_jobs_share_one_gpu_and_each_pays_the_mps_slowdown() -> None:
    result = run([light("a"), light("b")], ONE_GPU, "mps")

    assert result.start_s == (0.0, 0.0)
    assert result.end_s == (125.0, 125.0)  # 100 s of work at 1 / 1.25 speed
    shares = result.metrics()
    assert shares["share_light_jobs"] == 2
    assert shares["share_colocated_jobs"] == 2
    assert shares["share_stretch_mean"] == pytest.approx(1.25)
    assert shares["share_extra_run_s"] == pytest.approx(50.0)
    assert shares["share_jobs_per_gpu_mean"] == pytest.approx(2.0)
    assert shares["share_gpus_freed_mean"] == pytest.approx(1.0)


def test_with_sharing_off_the_same_light_jobs_take_turns_on_the_gpu() -> None:
    result = run([light("a"), light("b")], ONE_GPU, "off")

    assert result.start_s == (0.0, 100.0)
    assert result.end_s == (100.0, 200.0)
    assert "share_mode" not in result.metrics()


def test_a_heavy_job_never_shares_a_gpu() -> None:
    heavy = make_job("heavy", runtime=50.0)
    busy = replace(make_job("busy", runtime=50.0), usage_milli=800)  # above light_milli: heavy
    result = run([light("a"), heavy, busy, light("b", at=1.0)], ONE_GPU, "mps")

    # a runs alone at full speed; neither heavy job starts beside it; b waits its turn in FIFO
    assert result.start_s == (0.0, 100.0, 150.0, 200.0)
    assert result.end_s == (100.0, 150.0, 200.0, 300.0)
    assert result.metrics()["share_colocated_jobs"] == 0


def test_the_slowdown_applies_only_while_a_job_shares_its_gpu() -> None:
    # a runs alone for 10 s, then with b until a ends; b finishes alone at full speed
    result = run([light("a"), light("b", at=10.0)], ONE_GPU, "mps")

    assert result.start_s == (0.0, 10.0)
    assert result.end_s[0] == pytest.approx(10.0 + 90.0 * 1.25)  # 122.5
    assert result.end_s[1] == pytest.approx(122.5 + (100.0 - 112.5 / 1.25))  # 132.5
    assert result.metrics()["jct_mean_s"] == pytest.approx((122.5 + 122.5) / 2)


def test_the_slowdown_is_configurable_and_mig_has_none() -> None:
    assert run([light("a"), light("b")], ONE_GPU, "mps", slowdown=2.0).end_s == (200.0, 200.0)
    assert run([light("a"), light("b")], ONE_GPU, "mig").end_s == (100.0, 100.0)
    assert run([light("a"), light("b")], ONE_GPU, "timeslice").end_s == (140.0, 140.0)


def test_fractional_requests_are_light_and_pay_the_slowdown_only_with_a_mode() -> None:
    pods = [make_job("p", milli=400), make_job("q", milli=500)]

    assert run(pods, ONE_GPU, "off").end_s == (100.0, 100.0)  # the trace's own packing
    assert run(pods, ONE_GPU, "mps").end_s == (125.0, 125.0)


def test_timeslice_packs_at_most_its_jobs_per_gpu() -> None:
    jobs = [light(f"j{k}", usage=100) for k in range(5)]

    result = run(jobs, ONE_GPU, "timeslice")

    assert result.start_s.count(0.0) == 4  # four replicas per GPU; the fifth waits
    assert run(jobs, ONE_GPU, "mps").start_s.count(0.0) == 5


@pytest.mark.parametrize(
    ("mode", "demand", "hold"),
    [
        ("mps", 300, 300),
        ("mps", 10, 62),  # 16 clients per GPU at most
        ("timeslice", 100, 250),  # 4 replicas per GPU
        ("timeslice", 400, 400),
        ("mig", 100, 142),  # 1g
        ("mig", 143, 284),  # 2g
        ("mig", 500, 568),  # 4g
        ("mig", 600, 1000),  # 5 slices: only the 7g profile is larger, a whole GPU
    ],
)
def test_what_a_light_job_holds_under_each_mode(mode: str, demand: int, hold: int) -> None:
    assert Sharing(mode).hold_milli(demand) == hold


def test_which_jobs_are_light() -> None:
    sharing = Sharing("mps")
    assert sharing.demand_milli(make_job("pod", milli=230)) == 230
    assert sharing.demand_milli(light("l", usage=500)) == 500
    assert sharing.demand_milli(light("busy", usage=501)) is None
    assert sharing.demand_milli(make_job("plain")) is None  # usage unknown
    two = replace(make_job("two", gpus=2), usage_milli=100)
    assert sharing.demand_milli(two) is None  # only one-GPU jobs share
    assert Sharing("off").shared(light("l")) == light("l")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"mode": "vgpu"},
        {"mode": "mps", "slowdown": 0.9},
        {"mode": "mps", "max_jobs_per_gpu": 0},
        {"mode": "mps", "max_jobs_per_gpu": 46},
        {"mode": "mps", "light_milli": 1000},
    ],
)
def test_bad_sharing_settings_are_rejected(kwargs: dict[str, object]) -> None:
    with pytest.raises(ModelError):
        Sharing(**kwargs)  # type: ignore[arg-type]


def test_usage_milli_must_be_a_share_of_a_gpu() -> None:
    with pytest.raises(ModelError, match="usage_milli"):
        light("x", usage=0)


def test_sharing_off_replays_light_jobs_exactly_as_jobs_without_usage() -> None:
    jobs = [light(f"j{k}", at=k * 7.0, runtime=50.0 + k) for k in range(12)]
    plain = [replace(job, usage_milli=None) for job in jobs]
    cluster = make_cluster(1, 4)
    for order in ("fifo", "easy", "advisor"):
        before = simulate(plain, cluster, SimulationConfig(order=order))
        after = simulate(jobs, cluster, SimulationConfig(order=order, sharing=Sharing("off")))
        assert after.start_s == before.start_s
        assert after.end_s == before.end_s
        assert after.allocations == before.allocations
        assert after.metrics() == before.metrics()


# -- invariants on random workloads -------------------------------------------------------------


@st.composite
def shared_workloads(draw: st.DrawFn) -> tuple[list[Job], Cluster]:
    cluster = Cluster.uniform(draw(st.integers(1, 2)), draw(st.sampled_from([1, 2, 4])))
    jobs = []
    t = 0.0
    for i in range(draw(st.integers(1, 20))):
        t += draw(st.integers(0, 40))
        runtime = float(draw(st.integers(1, 200)))
        kind = draw(st.sampled_from(["light", "fractional", "heavy"]))
        if kind == "light":
            job = replace(make_job(i, at=t, runtime=runtime), usage_milli=draw(st.integers(1, 500)))
        elif kind == "fractional":
            job = make_job(i, at=t, runtime=runtime, milli=draw(st.integers(1, 999)))
        else:
            job = make_job(i, at=t, runtime=runtime, gpus=draw(st.integers(1, cluster.gpus)))
        jobs.append(job)
    return jobs, cluster


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shared_workloads(),
    st.sampled_from([m for m in SHARE_MODES if m != "off"]),
    st.sampled_from(["fifo", "easy", "advisor"]),
)
def test_never_more_than_the_packing_limit_on_a_gpu_and_every_job_runs_once(
    workload: tuple[list[Job], Cluster], mode: str, order: str
) -> None:
    jobs, cluster = workload
    sharing = Sharing(mode)
    result = simulate(jobs, cluster, SimulationConfig(order=order, sharing=sharing))

    assert len(result.jobs) == len(jobs) and not result.rejected
    slowdown = sharing.slowdown_factor
    for job, start, end in zip(result.jobs, result.start_s, result.end_s, strict=True):
        runtime = job.runtime_s or 0.0
        assert math.isfinite(start) and start >= job.submit_time_s
        assert runtime - 1e-6 <= end - start <= runtime * slowdown + 1e-6
        if not job.fractional:  # heavy: never slowed
            assert end - start == pytest.approx(runtime)
    # at every start, per GPU: held milli <= 1000, at most the mode's jobs, heavy jobs alone
    for t in sorted(set(result.start_s)):
        held: dict[tuple[int, int], list[Job]] = {}
        for job, start, end, allocation in zip(
            result.jobs, result.start_s, result.end_s, result.allocations, strict=True
        ):
            if allocation is None or not start <= t < end:
                continue
            for node, gpus in allocation.parts:
                for gpu in gpus:
                    held.setdefault((node, gpu), []).append(job)
        for on_gpu in held.values():
            assert sum(j.gpu_milli for j in on_gpu) <= MILLI_PER_GPU
            assert len(on_gpu) <= sharing.jobs_per_gpu
            assert len(on_gpu) == 1 or all(j.fractional for j in on_gpu)


# -- generated light jobs -----------------------------------------------------------------------


def _generated(light_share: float, seed: int = 3, users: bool = False) -> list[Job]:
    generate = generate_habitual_workload if users else generate_workload
    return generate(
        random.Random(seed),
        jobs=2000,
        cluster_gpus=64,
        load=1.2,
        mix="philly",
        light_share=light_share,
    )


@pytest.mark.parametrize("users", [False, True])
def test_light_share_marks_only_whole_one_gpu_jobs_and_changes_nothing_else(users: bool) -> None:
    plain = _generated(0.0, users=users)
    marked = _generated(0.3, users=users)

    assert [replace(job, usage_milli=None) for job in marked] == plain
    eligible = [j for j in marked if j.total_gpus == 1 and not j.fractional]
    lit = [j for j in marked if j.usage_milli is not None]
    assert set(lit) <= set(eligible)
    assert len(lit) / len(eligible) == pytest.approx(0.3, abs=0.04)
    assert {j.usage_milli for j in lit} <= {m for m, _ in LIGHT_USAGE}
    assert all(j.usage_milli is None for j in plain)


def test_light_share_zero_draws_the_same_workload_as_before() -> None:
    assert _generated(0.0) == generate_workload(
        random.Random(3), jobs=2000, cluster_gpus=64, load=1.2, mix="philly"
    )


def test_light_usage_comes_from_openbs_small_fractional_requests() -> None:
    assert all(0 < m <= MILLI_PER_GPU // 2 for m, _ in LIGHT_USAGE)
    assert sum(w for _, w in LIGHT_USAGE) == 1600


@pytest.mark.parametrize("share", [-0.1, 1.5])
def test_a_light_share_outside_0_to_1_is_rejected(share: float) -> None:
    with pytest.raises(ModelError, match="light share"):
        _generated(share)


def test_generated_light_jobs_pack_under_mps_and_shorten_the_waits() -> None:
    jobs = _generated(0.4)
    cluster = make_cluster(8, 8)
    off = simulate(jobs, cluster, SimulationConfig(order="easy"))
    mps = simulate(jobs, cluster, SimulationConfig(order="easy", sharing=Sharing("mps")))
    shares = mps.metrics()

    assert number(shares, "share_colocated_jobs") > 0
    assert number(shares, "share_jobs_per_gpu_mean") > 1.0
    assert 1.0 < number(shares, "share_stretch_mean") <= 1.25
    assert number(shares, "wait_mean_s") < number(off.metrics(), "wait_mean_s")


def number(metrics: dict[str, object], key: str) -> float:
    value = metrics[key]
    assert isinstance(value, int | float)
    return float(value)
