"""Spreading a job wider than a node: ``Job.spread`` builds the job field by field, and must
give what ``dataclasses.replace`` gives."""

from __future__ import annotations

from dataclasses import fields, replace

from hypothesis import given
from hypothesis import strategies as st

from gpuadvisor.model import Job

_INIT_FIELDS = [
    "job_id",
    "submit_time_s",
    "runtime_s",
    "gpus",
    "nodes",
    "gpu_milli",
    "user",
    "time_limit_s",
    "gpu_models",
    "cpu_milli",
    "memory_mib",
    "name",
    "account",
    "partition",
    "usage_milli",
]

_text = st.text(max_size=3)


@st.composite
def _jobs(draw: st.DrawFn) -> Job:
    return Job(
        draw(_text),
        draw(st.floats(min_value=0, max_value=1e9)),
        draw(st.none() | st.floats(min_value=0, max_value=1e7)),
        draw(st.integers(min_value=0, max_value=300)),
        draw(st.integers(min_value=1, max_value=3)),
        1000,
        draw(_text),
        draw(st.none() | st.floats(min_value=1, max_value=1e7)),
        draw(st.frozensets(st.sampled_from(["a100", "h100"]))),
        draw(st.integers(min_value=0, max_value=4000)),
        draw(st.integers(min_value=0, max_value=4096)),
        draw(_text),
        draw(_text),
        draw(_text),
        draw(st.none() | st.integers(min_value=1, max_value=1000)),
    )


def test_spread_names_every_field_of_a_job() -> None:
    # a field added to Job must be added to Job.spread too (it builds the job positionally)
    assert [f.name for f in fields(Job) if f.init] == _INIT_FIELDS


@given(_jobs(), st.integers(min_value=1, max_value=16))
def test_spread_is_replace_with_the_shape_over_whole_nodes(job: Job, node_gpus: int) -> None:
    spread = job.spread(node_gpus)
    if job.nodes > 1 or job.total_gpus <= node_gpus:
        assert spread is job
        return
    nodes = -(-job.total_gpus // node_gpus)
    expected = replace(job, gpus=-(-job.total_gpus // nodes), nodes=nodes)
    assert spread == expected
    assert [getattr(spread, f.name) for f in fields(Job)] == [
        getattr(expected, f.name) for f in fields(Job)
    ]
