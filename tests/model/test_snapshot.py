"""``Allocation.one_gpu_each``: the parts a replay on one-GPU nodes keeps, shared."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpuadvisor.model import MILLI_PER_GPU, Allocation


@given(st.lists(st.integers(0, 5000), max_size=64))
def test_it_equals_the_parts_spelled_out(nodes: list[int]) -> None:
    spelled = Allocation(tuple((node, (0,)) for node in nodes), MILLI_PER_GPU)
    assert Allocation.one_gpu_each(nodes) == spelled
    assert Allocation.one_gpu_each(nodes).gpu_count == len(nodes)


def test_two_allocations_share_their_parts() -> None:
    # the point of it: a replay of a real log keeps millions of parts, one object per node
    first, second = Allocation.one_gpu_each([3, 700, 4096]), Allocation.one_gpu_each([4096, 3])
    assert first.parts[0] is second.parts[1]
    assert first.parts[2] is second.parts[0]
