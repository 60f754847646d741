"""Any bytes given as a trace give jobs or a clear error naming the file, with memory bounded by
the input's size: the CSV trace readers (generic, Alibaba, Helios, Philly, Tiresias) and format
detection, on inputs that start like each format's header so that the readers, not only the
detection, see the fuzzed rows. The SWF reader has its own property
(tests/sources/traces/test_traces_swf.py)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuadvisor.errors import GpuAdvisorError
from gpuadvisor.sources.traces import load_trace

HEADERS = (
    b"job_id,submit_time,duration,num_gpus,user,time_limit,gpu_milli,name,account,partition\n",
    b"name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    b"deletion_time,scheduled_time\n",
    b"job_id,user,node_num,gpu_num,cpu_num,type,state,submit_time,start_time,end_time,"
    b"duration,queue\n",
    b"job_id,num_gpu,submit_time,duration\n",
    b"",
)
NUMBERS = (b"1", b"0", b"7", b"-1", b"1e308", b"nan", b"inf", b"99999999999999999999999999")
TEXTS = (b"x", b"", b'"', b"\x00", b"\xff", b"\xed\xa0\x80", b"2020-01-01 00:00:00", b" ", b"=1+1")
# mostly plain small numbers, so that many rows are read as jobs and the odd cell is the bad one
CELLS = st.sampled_from((b"1", b"7", b"3", b"60") * 12 + NUMBERS + TEXTS)


@st.composite
def rows(draw: st.DrawFn, header: bytes) -> bytes:
    """Rows of about the header's width (one more or fewer now and then), cells from CELLS."""
    width = max(1, header.count(b",") + 1)
    lines = []
    for i in range(draw(st.integers(0, 30))):
        n = width + draw(st.sampled_from([0, 0, 0, 0, -1, 1]))
        # the first column is the id in every format: mostly unique, now and then repeated
        first = draw(st.sampled_from([str(i + 1).encode()] * 9 + [b"1"]))
        lines.append(b",".join([first, *(draw(CELLS) for _ in range(n - 1))]))
    return b"\n".join(lines)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data(), header=st.sampled_from(HEADERS))
def test_any_bytes_give_jobs_or_a_clear_error_in_bounded_memory(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject, header: bytes
) -> None:
    body = data.draw(rows(header) | st.binary(max_size=2000))
    path: Path = tmp_path_factory.mktemp("fuzz") / "trace.csv"
    data_bytes = header + body
    path.write_bytes(data_bytes)
    tracemalloc.start()
    try:
        trace = load_trace(path)
    except GpuAdvisorError as exc:
        assert str(path) in str(exc), str(exc)
    else:
        assert len(trace.jobs) <= data_bytes.count(b"\n") + data_bytes.count(b"\r") + 1
        assert all(job.gpus >= 0 for job in trace.jobs)
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < 600_000 + 400 * len(data_bytes)
