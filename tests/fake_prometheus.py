"""A ``MetricsQuery`` for the advisor's tests: each query of a profile answered from fixed rows,
with the head-of-line scenario of ``tests.test_advice`` as Prometheus would report it (one node
of 8 GPUs; jobs 1 and 2 run on 6 of them; job 3 needs all 8 and blocks jobs 4 and 5).

It answers the bytes Prometheus' ``/api/v1/query`` would (``fetch`` gives a ``RawAnswer``), so
the advisor decodes and builds them exactly as it does the real client's answers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import orjson

from gpuadvisor.sources.prometheus.answers import PrometheusError, RawAnswer, Sample
from gpuadvisor.sources.prometheus.live.profiles import GPUADVISOR, Profile
from gpuadvisor.sources.prometheus.live.state import LiveSettings

Row = tuple[Mapping[str, str], float]
URL = "http://fake-prometheus.invalid/api/v1/query"
"""The query URL its answers name (in errors)."""
MIN = 60.0
DEFAULT_LIVE = LiveSettings()


class FakePrometheus:
    """Answers each query of ``profile`` (rendered with ``settings``) with ``rows[name]``; a
    query the profile does not have is an error, as is every query while ``down`` is set."""

    def __init__(
        self,
        rows: Mapping[str, Sequence[Row]],
        *,
        profile: Profile = GPUADVISOR,
        settings: LiveSettings = DEFAULT_LIVE,
    ) -> None:
        exprs = profile.render(
            selector=settings.selector,
            window_s=settings.window_s,
            share_window_s=settings.share_window_s,
        )
        self._rows = {expr: tuple(rows.get(name, ())) for name, expr in exprs.items()}
        self._names = {expr: name for name, expr in exprs.items()}
        self.down = ""
        self.queries = 0
        self.warnings: dict[str, tuple[str, ...]] = {}
        """Warnings (the API's ``warnings``) each answer to the query of that name carries."""

    def add(self, name: str, rows: Sequence[Row]) -> None:
        """More rows for the query ``name`` of the profile."""
        (expr,) = (e for e, n in self._names.items() if n == name)
        self._rows[expr] = (*self._rows[expr], *rows)

    def samples(self, expr: str, time_s: float | None = None) -> tuple[Sample, ...]:
        """What an answer to ``expr`` at ``time_s`` holds, before it is written as JSON."""
        at = 0.0 if time_s is None else time_s
        return tuple(Sample(dict(labels), float(value), at) for labels, value in self._rows[expr])

    def answer(self, expr: str, time_s: float | None = None) -> bytes:
        """The JSON body of a successful ``/api/v1/query`` answer to ``expr`` at ``time_s``
        (Prometheus writes a value as text, a timestamp as a number)."""
        series = [
            {"metric": dict(s.label_map), "value": [s.timestamp_s, repr(s.value)]}
            for s in self.samples(expr, time_s)
        ]
        body: dict[str, object] = {
            "status": "success",
            "data": {"resultType": "vector", "result": series},
        }
        warnings = self.warnings.get(self._names[expr], ())
        if warnings:
            body["warnings"] = list(warnings)
        return orjson.dumps(body)

    async def fetch(self, expr: str, *, time_s: float | None = None) -> RawAnswer:
        """The answer as the client reads it; while ``down``, the error a failed read gives."""
        self.queries += 1
        if self.down:
            raise PrometheusError(self.down)
        return RawAnswer(expr, self.answer(expr, time_s), 200, URL)


def head_of_line(now_s: float) -> FakePrometheus:
    """``head_of_line_snapshot`` ten minutes after job 1 was submitted, every input fresh."""
    t0 = now_s - 600.0
    node = {"node": "gpu01"}
    held = {0: "1", 1: "1", 2: "1", 3: "1", 4: "2", 5: "2"}
    uuid = [f"GPU-{i}" for i in range(8)]
    jobs = [  # id, state, GPUs, submitted at, started at, limit
        ("1", "RUNNING", 4, 0.0, 0.0, 120 * MIN),
        ("2", "RUNNING", 2, 10.0, 10.0, 60 * MIN),
        ("3", "PENDING", 8, 20.0, None, 240 * MIN),
        ("4", "PENDING", 1, 30.0, None, 30 * MIN),
        ("5", "PENDING", 2, 40.0, None, 20 * MIN),
    ]
    rows: dict[str, list[Row]] = {
        "node_gpus": [(node, 8.0)],
        "gpu_info": [
            (
                {**node, "gpu_uuid": uuid[i], "gpu_index": str(i), "name": "H100"}
                | {"topology_group": "0"},
                1.0,
            )
            for i in range(8)
        ],
        "gpu_jobs": [({"gpu_uuid": uuid[i], "job_id": job}, 1.0) for i, job in held.items()],
        "gpu_busy_ratio": [({"gpu_uuid": uuid[i]}, 0.9 if i in held else 0.0) for i in range(8)],
        "gpu_allocated_idle_ratio": [({"gpu_uuid": u}, 0.0) for u in uuid],
        "nvml_up": [({"instance": "gpu01:19842"}, 1.0)],
        "agent_age_seconds": [(node, 5.0)],
        "node_seen": [(node, 1.0)],
        "queue_up": [({}, 1.0)],
        "queue_age_seconds": [({}, 5.0)],
    }
    for job_id, state, gpus, submitted, started, limit in jobs:
        job = {"job_id": job_id}
        labels = {**job, "user": "u", "partition": "gpu", "state": state}
        rows.setdefault("job_info", []).append((labels, 1.0))
        rows.setdefault("job_gpus", []).append((job, float(gpus)))
        rows.setdefault("job_nodes", []).append((job, 1.0))
        rows.setdefault("job_submit_time", []).append((job, t0 + submitted))
        rows.setdefault("job_time_limit", []).append((job, limit))
        rows.setdefault("job_priority", []).append((job, 100.0 - float(job_id)))
        if started is not None:
            rows.setdefault("job_start_time", []).append((job, t0 + started))
            rows.setdefault("job_node", []).append(({**job, **node}, 1.0))
            for i, holder in held.items():
                if holder == job_id:
                    rows.setdefault("job_gpu", []).append(
                        ({**job, **node, "gpu_index": str(i)}, 1.0)
                    )
    return FakePrometheus(rows)
