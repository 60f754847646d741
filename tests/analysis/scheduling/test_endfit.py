"""End-fit's choice of the first nodes: the same list whichever way it is worked out."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpuadvisor.analysis.scheduling.endfit import _first_ranked, _least


@given(
    st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3)), max_size=200),
    st.integers(min_value=1, max_value=250),
)
def test_the_least_few_are_the_head_of_the_sorted_list(
    items: list[tuple[int, int]], count: int
) -> None:
    # heapq.nsmallest where count is a small part of the items, sorted otherwise: one answer,
    # ties (equal tuples) included
    assert _least(items, count) == sorted(items)[:count]


@given(
    st.sets(st.integers(0, 2000), max_size=300),
    st.integers(min_value=1, max_value=64),
    st.booleans(),
)
def test_the_first_ranked_nodes_by_rank_then_number(
    nodes: set[int], count: int, ranked: bool
) -> None:
    members = dict.fromkeys(sorted(nodes, key=lambda n: (n * 7919) % 2003))  # any order
    rank = tuple((n * 31) % 17 for n in range(2001)) if ranked else ()
    expected = sorted(members, key=lambda n: (rank[n], n) if rank else (n, n))[:count]
    if members:
        assert _first_ranked(members, count, rank) == expected
