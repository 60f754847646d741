"""``gpuadvisor demo`` from a wheel installed without the ``report`` extra (no matplotlib):
it prints its comparison and advice, writes its JSON files, and says that the plots need
``gpuadvisor[report]``, instead of stopping at once. The missing extra is made real in a fresh
interpreter: ``sys.modules["matplotlib"] = None`` makes every ``import matplotlib…`` fail as
on an install without it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLOTS = ("allocation_over_time.png", "wait_by_size.png", "idle_breakdown.png")
WITHOUT_MATPLOTLIB = """
import sys
sys.modules["matplotlib"] = None  # as on an install without the report extra
from gpuadvisor.cli import main
code = main(sys.argv[1:])
print("matplotlib imported:", any(
    name.startswith("matplotlib.") and sys.modules[name] is not None for name in sys.modules
))
sys.exit(code)
"""


def test_demo_without_the_report_extra_prints_everything_but_the_plots(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_MATPLOTLIB, "demo", "--output", str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": path, "COLUMNS": "200"},
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "Advisor vs strict FIFO:" in text
    assert "start-now:" in text  # the example advice
    assert "Advisor with predictions vs EASY with the users' limits:" in text
    assert "No plots: plots need matplotlib and numpy" in text
    assert "pip install 'matplotlib>=3.8,<4'" in text
    assert "matplotlib imported: False" in text
    for name in ("results.json", "users_limits_results.json", "advice.json"):
        assert (out / name).stat().st_size > 0, name
    assert not any((out / name).exists() for name in PLOTS)
