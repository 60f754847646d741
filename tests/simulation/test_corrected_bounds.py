"""A replay that plans with bounds on history-corrected limits (``corrected_bounds_window``).

On one node of 8 GPUs: users 'w' and 'x' each finished three jobs far inside their limits
(w: 100 s of 1,000 s; x: 50 s of 2,000 s). 'liar' (w, 6 GPUs, limit 1,000 s) starts at 200;
'head' (8 GPUs) waits for it from 201 and starves at once (``starvation_s`` 1 s); 'sneak'
(x, 2 GPUs, limit 2,000 s) arrives at 202. On the raw limits the head is reserved at 1,200
and the sneak's limit crosses that: it waits for the head. On corrected limits the head is
reserved at 300 and the sneak's corrected bound (50 s) ends before: it starts at once.
"""

from __future__ import annotations

from gpuadvisor.analysis.scheduling.orders import OrderSettings
from gpuadvisor.model import Job
from gpuadvisor.simulation.engine import SimulationConfig, simulate
from tests.builders import make_cluster, make_job

TEACH = [
    *(make_job(f"w{k}", at=0, runtime=100, limit=1000, user="w") for k in range(3)),
    *(make_job(f"x{k}", at=0, runtime=50, limit=2000, user="x") for k in range(3)),
]
HEAD = make_job("head", at=201, gpus=8, runtime=100, limit=100, user="v")
SNEAK = make_job("sneak", at=202, gpus=2, runtime=50, limit=2000, user="x")


def _liar(runtime: float) -> Job:
    return make_job("liar", at=200, gpus=6, runtime=runtime, limit=1000, user="w")


def _replay(window: int, jobs: list[Job]) -> tuple[dict[str, float], dict[str, object]]:
    settings = OrderSettings(starvation_s=1.0, corrected_bounds_window=window)
    config = SimulationConfig("advisor", estimates="predicted", settings=settings)
    result = simulate([*TEACH, *jobs], make_cluster(1, 8), config)
    starts = {job.job_id: s for job, s in zip(result.jobs, result.start_s, strict=True)}
    return starts, result.metrics()


def test_raw_limits_hold_the_sneak_behind_the_head() -> None:
    starts, metrics = _replay(0, [_liar(100), HEAD, SNEAK])
    assert (starts["head"], starts["sneak"]) == (300.0, 400.0)
    assert "bound_raises" not in metrics  # off: not counted


def test_corrected_limits_let_the_sneak_through_before_the_head() -> None:
    starts, metrics = _replay(10, [_liar(100), HEAD, SNEAK])
    assert (starts["head"], starts["sneak"]) == (300.0, 202.0)
    assert metrics["bound_raises"] == 0


def test_a_job_that_outlives_its_corrected_bound_is_planned_on_its_limit() -> None:
    # the liar runs 400 s, past its corrected bound (100 s): the pass at 350 (an arrival)
    # finds its bound end in the past and plans it with its raw limit, counted, no crash
    late = make_job("late", at=350, gpus=1, runtime=10, limit=10, user="y")
    starts, metrics = _replay(10, [_liar(400), HEAD, SNEAK, late])
    assert starts["sneak"] == 202.0
    assert starts["head"] == 600.0  # when the liar really ended
    assert metrics["bound_raises"] == 1
    assert metrics["reservation_slips"] == 1  # promised 300, started 600
