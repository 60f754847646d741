"""The settings and predictions a program sends to a worker process or copies survive pickle
and copy, on the sources and on the compiled build (whose frozen instances have no
``__dict__``: ``make test`` runs this file on both)."""

from __future__ import annotations

import copy
import pickle

import pytest

from gpuadvisor.analysis.prediction import Prediction
from gpuadvisor.analysis.scheduling.plans import OrderSettings


@pytest.mark.parametrize(
    "value",
    [
        OrderSettings(),
        OrderSettings(starvation_s=3600.0, bounds_after_s=None, express_s=600.0, priority="lxf"),
        Prediction(120.0, "user", similar_jobs=3, limit_s=600.0),
        Prediction(None, "none"),
    ],
)
def test_values_survive_pickle_and_copy(value: object) -> None:
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        assert pickle.loads(pickle.dumps(value, protocol)) == value
    assert copy.copy(value) == value
    assert copy.deepcopy(value) == value
