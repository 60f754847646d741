"""How a replay runs (``SimulationConfig``: order, placement, estimates, sharing, the pass
rules) and the jobs it can run (``prepare_jobs``). ``simulation.engine`` replays with them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuadvisor.analysis.capacity import Capacity
from gpuadvisor.analysis.prediction import RAISE_RULES
from gpuadvisor.analysis.predictors import DEFAULT_PREDICTOR, PREDICTORS
from gpuadvisor.analysis.scheduling.buckets import FitKey
from gpuadvisor.analysis.scheduling.orders import DEFAULT_PLACEMENT, ORDERS, OrderSettings
from gpuadvisor.analysis.scheduling.placement import PLACEMENTS
from gpuadvisor.errors import ModelError
from gpuadvisor.model import Cluster, Job
from gpuadvisor.simulation.sharing import Sharing

ESTIMATE_MODES = ("limit", "predicted", "exact", "user-last2")
"""``limit``: the job's time limit, else the median of its user's past runtimes for the same shape,
else unknown. ``predicted``: learned from completed jobs (``analysis.prediction``), never above the
limit; a running job that outlives its prediction is planned anew (``raise_rule``).
``exact``: the true runtime (an oracle; an upper bound for backfill). Whatever the estimates, a
running job that outlives its estimate (with ``estimate_noise``, or a user's median) is planned
anew like an outlived prediction.
``user-last2``: EASY++'s prediction (``prediction.user_last_two``), made once when the job is
submitted, as Tsafrir et al. make it; raised like ``predicted``."""


@dataclass(frozen=True, slots=True)
class SimulationConfig:
    order: str = "fifo"
    placement: str | None = None  # None: the order's default (DEFAULT_PLACEMENT)
    seed: int = 0
    estimates: str = "limit"
    estimate_noise: float = 0.0  # sigma of a log-normal factor on every estimate
    settings: OrderSettings = field(default_factory=OrderSettings)
    raise_rule: str = "double"  # predicted: what a job that outlived its prediction is planned with
    predictor: str = DEFAULT_PREDICTOR  # predicted: which predictor (``PREDICTORS``)
    label_estimates: bool = False  # the label names the estimates (``advisor@predicted``)
    sharing: Sharing = field(default_factory=Sharing)  # light jobs share GPUs (default off)
    alias: str = ""  # a named policy's name (``easy++``), shown in place of the order's
    # a raised prediction starts a scheduling pass (False: it waits for the next arrival or
    # end, as in Tsafrir et al.'s EASY++ and pyss, where a correction schedules nothing)
    pass_on_raise: bool = True
    # a pass after every single event of an instant, as pyss does: raised predictions, then
    # arrivals in input order, then ends in the order the jobs started (False: every event of
    # the instant, then one pass)
    pass_per_event: bool = False
    # the cluster's state after every instant in the result's ``timeline`` (the plots and the
    # demo draw it; False: an empty timeline, a replay of a real log spares 56,000 points)
    timeline: bool = True

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise ModelError(f"unknown order {self.order!r}; choose from {', '.join(ORDERS)}")
        if self.placement is not None and self.placement not in PLACEMENTS:
            raise ModelError(
                f"unknown placement {self.placement!r}; choose from {', '.join(PLACEMENTS)}"
            )
        if self.estimates not in ESTIMATE_MODES:
            raise ModelError(
                f"unknown estimate mode {self.estimates!r}; choose from {', '.join(ESTIMATE_MODES)}"
            )
        if self.estimate_noise < 0:
            raise ModelError("estimate noise must be >= 0")
        if self.predictor not in PREDICTORS:
            raise ModelError(
                f"unknown predictor {self.predictor!r}; choose from {', '.join(PREDICTORS)}"
            )
        if self.raise_rule not in RAISE_RULES:
            raise ModelError(
                f"unknown raise rule {self.raise_rule!r}; choose from {', '.join(RAISE_RULES)}"
            )

    @property
    def placement_name(self) -> str:
        return self.placement or DEFAULT_PLACEMENT[self.order]

    @property
    def label(self) -> str:
        default = DEFAULT_PLACEMENT[self.order]
        name = self.alias or self.order
        label = name if self.placement_name == default else f"{name}+{self.placement}"
        return f"{label}@{self.estimates}" if self.label_estimates else label


def prepare_jobs(jobs: Sequence[Job], cluster: Cluster) -> tuple[list[Job], list[Job]]:
    """Spread jobs wider than a node over whole nodes; set aside jobs no empty cluster could run.

    Returns (runnable, rejected), both in input order. A job needs a known runtime to replay.
    """
    empty = Capacity(cluster)
    width = cluster.max_node_gpus
    runnable: list[Job] = []
    rejected: list[Job] = []
    fits: dict[FitKey, bool] = {}  # where a job fits depends on its fit key alone
    for job in jobs:
        if job.runtime_s is None:
            raise ModelError(f"job {job.job_id!r} has no runtime; a replay needs one per job")
        spread = job.spread(width)
        fit = fits.get(spread.fit_key)
        if fit is None:
            fit = fits[spread.fit_key] = empty.fits(spread)
        (runnable if fit else rejected).append(spread)
    return runnable, rejected
