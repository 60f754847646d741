"""The settings of ``gpuadvisor simulate`` and ``gpuadvisor demo``: one frozen type each with the
only copy of its defaults, and one row per setting that the CLI generates its flag from
(docs/simulator.md, docs/configuration.md). The starvation bound's default is the scheduling
pass's own (``OrderSettings``), so the simulator, the demo and the advisor share it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpuadvisor.analysis.prediction import RAISE_RULES
from gpuadvisor.analysis.predictors import DEFAULT_PREDICTOR, PREDICTORS
from gpuadvisor.analysis.scheduling.orders import ORDERS, OrderSettings
from gpuadvisor.analysis.scheduling.placement import PLACEMENTS
from gpuadvisor.config.setting import Choices, Setting
from gpuadvisor.config.values import (
    at_least,
    integer,
    non_negative,
    optional_path,
    positive,
    ratio,
    seconds_or_zero,
    switch,
    text,
)
from gpuadvisor.errors import GpuAdvisorError, ModelError
from gpuadvisor.simulation.compare import parse_policy
from gpuadvisor.simulation.engine import ESTIMATE_MODES, SimulationConfig
from gpuadvisor.simulation.generator import MIXES
from gpuadvisor.simulation.sharing import SHARE_MODES, Sharing
from gpuadvisor.sinks.report.swf_schedule import is_swf
from gpuadvisor.sources.traces import READERS
from gpuadvisor.sources.traces.swf import FILTERS as SWF_FILTERS

PROTOCOLS = ("replay", "inflation")

LIMIT_MODELS = ("tight", "users")
"""Time limits of a generated workload: ``tight`` (runtime x 1-3, rounded up to a round value),
``users`` (the limits users really give: ``simulation.habits``)."""

GENERATED_LOAD = 1.0
"""The offered load of a generated workload when ``--load`` is not given."""

_ORDER = OrderSettings()


@dataclass(frozen=True, slots=True)
class SimulateSettings:
    """Every setting of ``gpuadvisor simulate``. ``load`` None: a trace keeps its arrivals and a
    generated workload has ``GENERATED_LOAD``."""

    trace: str | None = None
    generate: str | None = None
    format: str | None = None
    swf_filter: str = "literature"
    jobs: int = 10_000
    cluster: str = "16x8"
    nodes: str | None = None
    outages: str | None = None
    policies: str = "fifo,easy,advisor"
    protocol: str = "replay"
    load: float | None = None
    seed: int = 0
    seeds: int = 1
    limits: str = "tight"
    light_share: float = 0.0
    share: str = "off"
    share_slowdown: float | None = None  # None: the sharing mode's own (``SHARE_MODES``)
    estimates: str = "limit"
    estimate_noise: float = 0.0
    raise_rule: str = "double"
    predictor: str = DEFAULT_PREDICTOR
    starvation_s: float = _ORDER.starvation_s
    output_json: str | None = None
    plots: str | None = None
    output_schedule: str | None = None
    schedule_policy: str | None = None
    no_baseline: bool = False
    pass_per_event: bool = False

    @property
    def sharing(self) -> Sharing:
        """GPU sharing of the replays (``--share``, ``--share-slowdown``)."""
        return Sharing(self.share, slowdown=self.share_slowdown)

    def configs(self) -> list[SimulationConfig]:
        """The replays' policies (``--policies``, ``--protocol replay``), each with the
        estimates, predictor, starvation bound and sharing given."""
        base = SimulationConfig(
            seed=self.seed,
            estimates=self.estimates,
            estimate_noise=self.estimate_noise,
            raise_rule=self.raise_rule,
            predictor=self.predictor,
            settings=OrderSettings(starvation_s=self.starvation_s),
            sharing=self.sharing,
            pass_per_event=self.pass_per_event,
            timeline=self.plots is not None,  # (only the plots draw it)
        )
        configs = [parse_policy(spec, base) for spec in self.policies.split(",") if spec.strip()]
        if not configs:
            raise ModelError("--policies names no policy")
        return configs

    def placements(self) -> list[str]:
        """The placements ``--protocol inflation`` compares (``--policies``)."""
        names = [p.strip() for p in self.policies.split(",") if p.strip()]
        if not names:
            raise GpuAdvisorError("--policies names no placement")
        for name in names:
            if name not in PLACEMENTS:
                raise GpuAdvisorError(
                    f"--protocol inflation compares placements; {name!r} is not one of "
                    + ", ".join(PLACEMENTS)
                )
        return names

    def check(self) -> None:
        """The checks across settings (each flag alone is checked as it is parsed), before
        anything is read or written. Raises ``GpuAdvisorError`` naming the flags;
        ``gpuadvisor check-config -- simulate ...`` runs it."""
        replay = self.protocol == "replay"
        if self.output_schedule is not None:
            if not replay:
                raise GpuAdvisorError("--output-schedule needs --protocol replay")
        elif self.schedule_policy is not None:
            raise GpuAdvisorError("--schedule-policy needs --output-schedule")
        if self.outages is not None:
            if not replay:
                raise GpuAdvisorError("--outages needs --protocol replay (inflation has no clock)")
            if self.load is not None:
                raise GpuAdvisorError(
                    "--outages keeps the trace's own clock; --load would move the arrivals off it"
                )
        if self.trace and self.limits != "tight":
            raise GpuAdvisorError(
                "--limits shapes a generated workload; a trace keeps its own limits"
            )
        if self.trace and self.light_share:
            raise GpuAdvisorError(
                "--light-share shapes a generated workload; a trace has its own jobs"
            )
        if self.share_slowdown is not None and self.share == "off":
            raise GpuAdvisorError(
                "--share-slowdown needs a sharing mode (--share mps|timeslice|mig)"
            )
        if self.sharing.on and not replay:
            raise GpuAdvisorError("--share needs --protocol replay")
        if not replay:
            self.placements()
            return
        labels = [config.label for config in self.configs()]
        if self.schedule_policy is not None and self.schedule_policy not in labels:
            raise GpuAdvisorError(
                f"--schedule-policy {self.schedule_policy!r} is not a listed policy; "
                f"the policies are {', '.join(labels)}"
            )
        schedule = self.output_schedule
        if (
            schedule is not None
            and is_swf(Path(schedule))
            and self.schedule_policy is None
            and len(labels) > 1
        ):
            raise GpuAdvisorError(
                "--output-schedule *.swf holds one policy's replay: name it with "
                f"--schedule-policy (one of {', '.join(labels)})"
            )


@dataclass(frozen=True, slots=True)
class DemoSettings:
    """Every setting of ``gpuadvisor demo``."""

    output: str = "demo-output"
    starvation_s: float = _ORDER.starvation_s


STARVATION = Setting(
    "starvation_s",
    "--starvation",
    seconds_or_zero,
    "advisor: also reserve for jobs that waited this long",
)

SIMULATE_SETTINGS: tuple[Setting, ...] = (
    Setting("trace", "--trace", optional_path, "job trace file", metavar="FILE", group="input"),
    Setting(
        "generate",
        "--generate",
        text,
        "generate a workload from a published size mix: " + ", ".join(sorted(MIXES)),
        metavar="MIX",
        group="input",
    ),
    Setting("format", "--format", text, "trace format (default: detect)"),
    Setting(
        "swf_filter",
        "--swf-filter",
        text,
        "an SWF log's jobs: literature (keep 0 < processors <= the cluster's, run time > 0, "
        "requested time > 0, submit >= 0; run time capped at the request; the dropped are "
        "counted) or none (every record)",
    ),
    Setting("jobs", "--jobs", at_least(1), "jobs to generate, with --generate", metavar="N"),
    Setting("cluster", "--cluster", text, "uniform cluster NODESxGPUS[/GROUP]", group="cluster"),
    Setting(
        "nodes",
        "--nodes",
        optional_path,
        "node list file (Alibaba or Tiresias format)",
        metavar="FILE",
        group="cluster",
    ),
    Setting(
        "outages",
        "--outages",
        optional_path,
        "replay only: node outages (node,start_time,end_time,reason, on the trace's clock, "
        "as whatif --output-outages writes them); every policy's replay keeps those nodes out",
        metavar="FILE",
    ),
    Setting(
        "policies",
        "--policies",
        text,
        "comma-separated ORDER[+PLACEMENT]; orders: "
        + ", ".join(ORDERS)
        + "; placements: "
        + ", ".join(PLACEMENTS)
        + " (for --protocol inflation: placements only)",
    ),
    Setting(
        "protocol",
        "--protocol",
        text,
        "replay: queue orders over time; inflation: FGD's placement protocol",
    ),
    Setting(
        "load",
        "--load",
        positive,
        f"offered load: rescale a trace's arrivals to it, or generate at it (default "
        f"{GENERATED_LOAD:g} when generating)",
    ),
    Setting(
        "seed",
        "--seed",
        integer,
        "seed of the generator, the random placement and the estimate noise",
    ),
    Setting("seeds", "--seeds", at_least(1), "inflation: average over this many seeds"),
    Setting(
        "limits",
        "--limits",
        text,
        "with --generate: the jobs' time limits: tight (runtime x 1-3, rounded up to a round "
        "value) or users (the limits users really give: recurring jobs, round values up to a "
        "72 h maximum, median ~10x the runtime; docs/workloads.md)",
    ),
    Setting(
        "light_share",
        "--light-share",
        ratio,
        "with --generate: the share of whole one-GPU jobs that are light (use a small part of "
        "their GPU; docs/workloads.md)",
        metavar="RATIO",
    ),
    Setting(
        "share",
        "--share",
        text,
        "GPU sharing of light jobs (fractional requests, jobs that use a small part of their "
        "GPU): off, mps, timeslice or mig (docs/simulator.md)",
        metavar="MODE",
    ),
    Setting(
        "share_slowdown",
        "--share-slowdown",
        positive,
        "with --share: runtime factor of a job while it shares its GPU (>= 1; default: the "
        "mode's: mps 1.25, timeslice 1.4, mig 1)",
        metavar="FACTOR",
    ),
    Setting(
        "estimates",
        "--estimates",
        text,
        "runtime estimates for backfill: limit (time limit, else the median of the "
        "user's past runtimes of that shape), predicted (learned from completed jobs, never "
        "above the limit) or exact (the true runtime, an oracle)",
    ),
    Setting(
        "raise_rule",
        "--raise-rule",
        text,
        "with --estimates predicted: what a running job that outlived its prediction is "
        "planned with: double (twice what it has run, at most its limit) or limit",
    ),
    Setting(
        "predictor",
        "--predictor",
        text,
        "with --estimates predicted (or POLICY@predicted): recent (the mean of the last two "
        "similar runs) or learned (an online linear model that costs under-prediction more)",
    ),
    Setting(
        "estimate_noise",
        "--estimate-noise",
        non_negative,
        "multiply each job's estimates by a log-normal factor exp(N(0, SIGMA))",
        metavar="SIGMA",
    ),
    STARVATION,
    Setting(
        "output_json",
        "--output-json",
        optional_path,
        "write the results as JSON here",
        metavar="FILE",
    ),
    Setting("plots", "--plots", optional_path, "write PNG plots into DIR", metavar="DIR"),
    Setting(
        "output_schedule",
        "--output-schedule",
        optional_path,
        "write where and when each job ran, one CSV row per (policy, job, node), for "
        "gpuadvisor agent --sim.schedule (replay only); a path ending in .swf writes one "
        "policy's replay in the Standard Workload Format (pyss, Batsim/evalys, Alea)",
        metavar="FILE",
    ),
    Setting(
        "schedule_policy",
        "--schedule-policy",
        text,
        "only this policy's rows in --output-schedule (a label as in the results, e.g. "
        "advisor or easy+best-fit; default: every listed policy)",
        metavar="POLICY",
    ),
    Setting(
        "no_baseline",
        "--no-baseline",
        switch,
        "replay: skip the strict-FIFO baseline that runs besides the listed policies when fifo "
        "is not among them; the Δ-wait-vs-FIFO figures (delta_wait_vs_fifo_*) are then absent",
    ),
    Setting(
        "pass_per_event",
        "--pass-per-event",
        switch,
        "replay: a scheduling pass after every single event of an instant, as the pyss "
        "simulator does (arrivals first, then ends in the order the jobs started), instead of "
        "one pass after all of them; reproduces pyss's schedules of the published logs",
    ),
)

SIMULATE_CHOICES: Choices = {
    "generate": tuple(sorted(MIXES)),
    "format": tuple(sorted(READERS)),
    "swf_filter": SWF_FILTERS,
    "protocol": PROTOCOLS,
    "estimates": ESTIMATE_MODES,
    "raise_rule": tuple(RAISE_RULES),
    "predictor": tuple(PREDICTORS),
    "limits": LIMIT_MODELS,
    "share": tuple(SHARE_MODES),
}

DEMO_SETTINGS: tuple[Setting, ...] = (
    Setting("output", "--output", text, "folder for outputs", metavar="DIR"),
    STARVATION,
)
