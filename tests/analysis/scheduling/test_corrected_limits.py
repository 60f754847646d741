"""History-corrected limits (``corrected_limits``): within [prediction, limit], from the user's own
finished jobs, the raw limit without enough of them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuadvisor.analysis.scheduling.corrected_limits import (
    MIN_RATIOS,
    InflationHistory,
    corrected_limit,
)
from tests.builders import make_job

seconds = st.floats(min_value=1.0, max_value=1e7, allow_nan=False)


@given(
    limit=seconds,
    share=st.floats(min_value=0.0, max_value=1.0),
    runs=st.lists(st.tuples(seconds, seconds), max_size=30),
    window=st.integers(min_value=1, max_value=20),
    quantile=st.floats(min_value=0.01, max_value=1.0),
)
def test_never_above_the_limit_never_below_the_prediction(
    limit: float,
    share: float,
    runs: list[tuple[float, float]],
    window: int,
    quantile: float,
) -> None:
    history = InflationHistory(window, quantile)
    for runtime, past_limit in runs:
        history.record(make_job("past", runtime=runtime, limit=past_limit, user="u"), runtime)
    prediction = share * limit  # a prediction is never above the limit
    bound = history.bound(make_job("j", limit=limit, user="u"), prediction)
    assert bound is not None
    assert prediction <= bound <= limit


def test_the_largest_of_the_last_ratios_times_the_limit() -> None:
    history = InflationHistory(window=3)
    for runtime in (900.0, 100.0, 200.0, 300.0):  # 900 s falls out of the window of 3
        history.record(make_job("p", runtime=runtime, limit=1000.0, user="u"), runtime)
    assert history.bound(make_job("j", limit=5000.0, user="u"), 10.0) == pytest.approx(1500.0)
    # never below the prediction
    assert history.bound(make_job("j", limit=5000.0, user="u"), 2000.0) == 2000.0


def test_a_quantile_below_one_drops_the_largest_ratios() -> None:
    history = InflationHistory(window=20, quantile=0.5)
    for runtime in (100.0, 200.0, 300.0, 400.0):
        history.record(make_job("p", runtime=runtime, limit=1000.0, user="u"), runtime)
    assert history.ratio("u") == pytest.approx(0.2)  # nearest rank: the 2nd of 4


def test_without_enough_history_the_raw_limit() -> None:
    history = InflationHistory(window=10)
    for _ in range(MIN_RATIOS - 1):
        history.record(make_job("p", runtime=10.0, limit=1000.0, user="u"), 10.0)
    assert history.bound(make_job("j", limit=1000.0, user="u"), None) == 1000.0
    assert history.bound(make_job("j", limit=1000.0, user="other"), None) == 1000.0
    # jobs without a user (or a limit) teach nothing and are never corrected
    for _ in range(MIN_RATIOS):
        history.record(make_job("p", runtime=10.0, limit=1000.0), 10.0)
    assert history.bound(make_job("j", limit=1000.0), None) == 1000.0
    assert corrected_limit(None, 5.0, 0.1) is None


def test_runtimes_past_the_limit_count_as_the_limit() -> None:
    history = InflationHistory(window=5)
    for _ in range(MIN_RATIOS):
        history.record(make_job("p", runtime=2000.0, limit=1000.0, user="u"), 2000.0)
    assert history.ratio("u") == 1.0


@pytest.mark.parametrize(("window", "quantile"), [(0, 1.0), (5, 0.0), (5, 1.5)])
def test_bad_settings_are_refused(window: int, quantile: float) -> None:
    with pytest.raises(ValueError, match=r"window|quantile"):
        InflationHistory(window, quantile)
