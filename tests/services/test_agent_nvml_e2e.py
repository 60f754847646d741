"""End to end: ``gpuadvisor agent --backend=nvml`` in a subprocess, real pynvml, fake library."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fake_nvml import GIB, FakeProcess, make_gpu
from tests.fake_nvml.fixtures import FakeNvml
from tests.ports import free_port

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            body: bytes = response.read()
            return body.decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def parse(text: str) -> Series:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(series: Series, name: str, **labels: str) -> float | None:
    return series.get((name, tuple(sorted(labels.items()))))


@pytest.mark.e2e
@pytest.mark.slow
def test_agent_serves_nvml_metrics_that_promtool_accepts(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    assert shutil.which("promtool"), "promtool is missing: `make test` installs it (prometheus)"
    busy = make_gpu(
        0,
        util=((0.0, 100),),
        memory_used_bytes=20 * GIB,
        power_mw=400_000,
        processes=(FakeProcess(4242, GIB),),
    )
    limited = make_gpu(1, unsupported=("nvmlDeviceGetPowerUsage",))
    fake_nvml.write([busy, limited])
    port = free_port()
    log = (tmp_path / "agent.log").open("w")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuadvisor",
            "agent",
            "--backend=nvml",
            f"--web.listen-address=127.0.0.1:{port}",
            "--collect.interval=0.2",
            f"--jobs.proc-root={tmp_path}",
            "--nvml.node=gpu-07",  # the scheduler's name for this node, not the host name
        ],
        env=fake_nvml.subprocess_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        deadline = time.monotonic() + 30
        first: Series | None = None
        while time.monotonic() < deadline:
            text = scrape(url)
            if text is not None:
                series = parse(text)
                busy_s = value(series, "gpuadvisor_gpu_busy_seconds_total", gpu_uuid=busy.uuid)
                if first is None and busy_s is not None:
                    first = series
                elif first is not None and busy_s is not None:
                    before = value(first, "gpuadvisor_gpu_busy_seconds_total", gpu_uuid=busy.uuid)
                    assert before is not None
                    if busy_s >= before + 0.5:
                        break
            assert process.poll() is None, (tmp_path / "agent.log").read_text()
            time.sleep(0.2)
        else:
            pytest.fail(f"busy seconds did not rise: {(tmp_path / 'agent.log').read_text()}")

        assert value(series, "gpuadvisor_nvml_up") == 1
        nodes = {dict(labels)["node"] for name, labels in series if name == "gpuadvisor_node_info"}
        assert nodes == {"gpu-07"}
        assert value(series, "gpuadvisor_node_gpus") == 2
        for uuid in (busy.uuid, limited.uuid):
            assert value(series, "gpuadvisor_gpu_up", gpu_uuid=uuid) == 1
            assert value(series, "gpuadvisor_gpu_memory_total_bytes", gpu_uuid=uuid) == 80 * GIB
        assert value(series, "gpuadvisor_gpu_memory_used_bytes", gpu_uuid=busy.uuid) == 20 * GIB
        assert value(series, "gpuadvisor_gpu_power_watts", gpu_uuid=busy.uuid) == 400.0
        assert value(series, "gpuadvisor_gpu_power_watts", gpu_uuid=limited.uuid) is None
        assert value(series, "gpuadvisor_gpu_processes", gpu_uuid=busy.uuid) == 1
        assert value(series, "gpuadvisor_gpu_energy_joules_total", gpu_uuid=busy.uuid)

        checked = subprocess.run(
            ["promtool", "check", "metrics"],
            check=False,
            input=text,
            capture_output=True,
            text=True,
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        log.close()
