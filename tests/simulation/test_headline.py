"""What leads a comparison of policies (``simulation.headline``): allocation where the order
changed how much of the cluster was used, waits and slowdown where every policy kept the same
allocation (the cluster was not backlogged), with a reason a report prints as it is."""

from __future__ import annotations

import math
import random

from hypothesis import given
from hypothesis import strategies as st

from gpuadvisor.model import Cluster
from gpuadvisor.simulation.compare import compare
from gpuadvisor.simulation.engine import SimulationConfig
from gpuadvisor.simulation.generator import generate_workload
from gpuadvisor.simulation.headline import HEADLINE_SPREAD_PP, headline, metrics_headline


def test_allocations_within_half_a_point_lead_with_waits_and_say_why() -> None:
    lead = headline({"fifo": 0.4121, "easy": 0.4158, "advisor": 0.4160})

    assert lead.kind == "waits" and lead.waits
    assert lead.reason == (
        "the cluster was not backlogged: every policy kept 41.2–41.6 % of the GPUs allocated, "
        "so the difference is in how long jobs waited"
    )
    assert math.isclose(lead.allocation_spread_pp, 0.39)


def test_the_same_allocation_everywhere_is_said_once() -> None:
    lead = headline({"fifo": 0.339286, "easy": 0.339286})

    assert lead.kind == "waits"
    assert "every policy kept 33.9 % of the GPUs allocated" in lead.reason
    assert lead.allocation_spread_pp == 0.0


def test_allocations_further_apart_keep_the_allocation_headline() -> None:
    lead = headline({"fifo": 0.804, "easy": 0.954, "advisor": 0.965})

    assert lead.kind == "allocation" and not lead.waits
    assert lead.reason.startswith("allocations differ by 16.1 pp between policies")


def test_the_line_is_half_a_point_inclusive() -> None:
    assert headline({"a": 0.5, "b": 0.505}).kind == "waits"
    assert headline({"a": 0.5, "b": 0.50501}).kind == "allocation"


def test_nothing_to_compare_keeps_the_allocation_headline() -> None:
    assert headline({"easy": 0.7}).kind == "allocation"
    assert headline({}).kind == "allocation"
    unknown = headline({"fifo": math.nan, "easy": 0.7})
    assert unknown.kind == "allocation" and math.isnan(unknown.allocation_spread_pp)


def test_the_document_is_what_scripts_read() -> None:
    assert headline({"fifo": 0.3, "easy": 0.3}).document() == {
        "kind": "waits",
        "reason": (
            "the cluster was not backlogged: every policy kept 30.0 % of the GPUs allocated, "
            "so the difference is in how long jobs waited"
        ),
        "allocation_spread_pp": 0.0,
        "threshold_pp": HEADLINE_SPREAD_PP,
    }


@given(
    st.lists(st.floats(0.0, 0.99), min_size=2, max_size=6),
    st.floats(-0.5, 0.5),
    st.randoms(use_true_random=False),
)
def test_the_choice_depends_on_the_spread_only(
    allocations: list[float], shift: float, rng: random.Random
) -> None:
    """Shifting every allocation alike or listing the policies in another order does not
    change what leads; waits lead exactly when no two allocations are more than the line
    apart."""
    named = {f"p{i}": v for i, v in enumerate(allocations)}
    shuffled = list(named.items())
    rng.shuffle(shuffled)
    shifted = {k: min(max(v + shift, 0.0), 1.0) for k, v in named.items()}
    lead = headline(named)
    assert headline(dict(shuffled)).kind == lead.kind
    if all(0.0 < v + shift < 1.0 for v in allocations):
        # a shift moves every value alike only where no value is clipped; rounding aside
        spread = (max(allocations) - min(allocations)) * 100
        if abs(spread - HEADLINE_SPREAD_PP) > 1e-6:
            assert headline(shifted).kind == lead.kind
    pairs = [abs(a - b) * 100 for a in allocations for b in allocations]
    assert lead.waits == (max(pairs) <= HEADLINE_SPREAD_PP + 1e-9)


def test_replays_of_a_light_and_a_heavy_load_lead_differently() -> None:
    """Real replays: at a light load every order reaches the same allocation, at a heavy one
    strict FIFO leaves GPUs idle that backfilling uses."""
    cluster = Cluster.parse_shape("2x8")
    configs = [SimulationConfig(order=o) for o in ("fifo", "easy", "advisor")]

    def lead(load: float) -> str:
        jobs = generate_workload(random.Random(3), jobs=300, cluster_gpus=16, load=load)
        return metrics_headline((r.label, r.metrics) for r in compare(jobs, cluster, configs)).kind

    assert lead(0.3) == "waits"
    assert lead(1.3) == "allocation"


def test_a_cluster_full_under_every_policy_is_not_called_idle() -> None:
    lead = headline({"fifo": 0.9995, "easy": 1.0})

    assert lead.kind == "waits"
    assert lead.reason.startswith("the cluster was full under every policy: every policy kept")
