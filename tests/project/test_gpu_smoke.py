"""scripts/gpu_smoke.sh, end to end against the fake libnvidia-ml (no GPU here): the same script
that runs on a real GPU machine, with the PyTorch load replaced by a scenario rewrite that drives
GPU 0 to 100 % (the device check itself runs on a lent GPU machine)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fake_nvml import make_gpu
from tests.fake_nvml.fixtures import FakeNvml

ROOT = Path(__file__).resolve().parents[2]

LOAD = """
import sys, time
from pathlib import Path
from tests.fake_nvml import make_gpu, write_scenario
scenario, epoch, seconds = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
loaded = make_gpu(0, util=((0.0, 100),), power_mw=650_000)
write_scenario(scenario, [loaded, make_gpu(1)], epoch_us=epoch)
time.sleep(1.5)  # a probe or two sees the load before the script is told it started
print("started", flush=True)
time.sleep(seconds)
write_scenario(scenario, [make_gpu(0), make_gpu(1)], epoch_us=epoch)
print("loaded GPU 0")
"""


@pytest.mark.e2e
@pytest.mark.slow
def test_the_smoke_script_passes_against_the_fake_nvml(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    epoch = fake_nvml.write([make_gpu(0), make_gpu(1)])
    out = tmp_path / "report"
    env = fake_nvml.subprocess_env()
    env["PYTHONPATH"] = str(ROOT)
    env["PYTHON"] = sys.executable
    load = [sys.executable, "-c", LOAD, str(fake_nvml.scenario), str(epoch), "4"]
    result = subprocess.run(
        [
            "bash",
            str(ROOT / "scripts" / "gpu_smoke.sh"),
            str(out),
            "--idle-s",
            "3",
            "--load-s",
            "4",
            "--ready-s",
            "30",
            "--samples-interval",
            "1",  # windows of seconds here; on a GPU the defaults' windows outlast 10 s
            "--load-command",
            *load,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ok"] is True
    assert summary["checks"]["busy seconds rise under load"] is True
    assert summary["checks"]["promtool check metrics"] is True
    assert max(summary["load"].values()) > 0.5  # GPU 0, at 100 % for most of the window
    assert min(summary["load"].values()) == 0.0  # GPU 1 stayed idle
    assert summary["checks"]["gpuadvisor_gpu_power_watts higher under load"] is True
    assert summary["checks"]["GPU 0 attributed to job smoke-1"] is True
    assert summary["checks"]["free GPUs leave the held GPU out"] is True
    assert "gpuadvisor_gpu_sm_active_ratio higher under load" not in summary["checks"]  # no GPM
    for name in (
        "report.md",
        "agent.log",
        "metrics_start.prom",
        "metrics_idle.prom",
        "metrics_during.prom",
        "metrics_load.prom",
    ):
        assert (out / name).exists()
    assert "GPU smoke test: PASS" in (out / "report.md").read_text()


@pytest.mark.e2e
def test_the_smoke_script_fails_when_no_load_shows(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    fake_nvml.write([make_gpu(0)])
    out = tmp_path / "report"
    env = fake_nvml.subprocess_env()
    env["PYTHONPATH"] = str(ROOT)
    env["PYTHON"] = sys.executable
    result = subprocess.run(
        [
            "bash",
            str(ROOT / "scripts" / "gpu_smoke.sh"),
            str(out),
            "--idle-s",
            "2",
            "--load-s",
            "2",
            "--load-command",
            sys.executable,
            "-c",
            "print('no load')",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["checks"]["busy seconds rise under load"] is False
    assert summary["checks"]["load started"] is False  # it never printed "started"
