"""The runtime predictors by name, for ``--predictor`` (``simulate``) and the replay engine."""

from __future__ import annotations

from collections.abc import Callable

from gpuadvisor.analysis.learned_prediction import LearnedPredictor
from gpuadvisor.analysis.prediction import Predictor, RuntimePredictor

PREDICTORS: dict[str, Callable[[], Predictor]] = {
    "recent": RuntimePredictor,
    "learned": LearnedPredictor,
}
"""``recent``: the mean of the last two similar runs (Tsafrir et al. 2007); ``learned``: an
online linear model with an asymmetric loss (Gaussier et al. 2015)."""

DEFAULT_PREDICTOR = "recent"
