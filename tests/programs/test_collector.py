"""The collector's pace during a replay: raised inside the block, restored after (also when the
replay fails), and never lowered."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from gpuadvisor.programs.collector import YOUNG_THRESHOLD, fewer_collections


@pytest.fixture
def threshold() -> Iterator[tuple[int, int, int]]:
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield gc.get_threshold()
    gc.set_threshold(*before)


def test_the_young_threshold_is_raised_in_the_block_and_restored(
    threshold: tuple[int, int, int],
) -> None:
    with fewer_collections():
        assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)
        assert gc.isenabled()
    assert gc.get_threshold() == threshold


def test_it_is_restored_when_the_replay_fails(threshold: tuple[int, int, int]) -> None:
    with pytest.raises(RuntimeError, match="replay failed"), fewer_collections():
        raise RuntimeError("replay failed")
    assert gc.get_threshold() == threshold


def test_a_higher_threshold_is_kept(threshold: tuple[int, int, int]) -> None:
    gc.set_threshold(10 * YOUNG_THRESHOLD, 10, 10)
    with fewer_collections():
        assert gc.get_threshold()[0] == 10 * YOUNG_THRESHOLD
    with fewer_collections(young=100):
        assert gc.get_threshold()[0] == 10 * YOUNG_THRESHOLD
