"""The ``gpuadvisor whatif`` report opened in a real headless browser (Debian's ``chromium``,
`make system-deps`): it renders with no console message, makes no external request, every plot
decodes, and every figure on the page equals the one in ``--output-json``. A control page with a
console error and an external image shows that the checks catch both."""

from __future__ import annotations

import json
import random
import subprocess
from dataclasses import dataclass, field, replace
from html.parser import HTMLParser
from pathlib import Path

import pytest

from gpuadvisor.model import Cluster
from gpuadvisor.model.duration import format_duration
from gpuadvisor.simulation.engine import SimulationConfig, simulate
from gpuadvisor.simulation.generator import generate_workload
from tests.cli.test_whatif_cli import T0, sacct_text_of
from tests.commands import gpuadvisor
from tests.harness.process import require_binary

DATA = Path(__file__).parents[2] / "data" / "slurm"
HANG_GUARD_S = 120  # a browser that never exits fails the test; not a speed bound

PROBE = """<script>
window.addEventListener("load", () => {
  document.body.dataset.images = [...document.images].map((i) => i.naturalWidth).join(",");
});
</script></body>"""
"""Appended to a copy of the page: after load, the body records each image's decoded width."""


@dataclass
class Page:
    """What the browser's DOM holds: figure cells, image sources and widths, console lines."""

    cells: dict[str, tuple[str, str]] = field(default_factory=dict)  # pointer → (value, text)
    sources: list[str] = field(default_factory=list)
    image_widths: list[int] = field(default_factory=list)
    console: list[str] = field(default_factory=list)


class _DomReader(HTMLParser):
    def __init__(self, page: Page) -> None:
        super().__init__()
        self.page = page
        self.key: tuple[str, str] | None = None
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        for name in ("src", "href"):
            if found.get(name):
                self.page.sources.append(str(found[name]))
        if tag == "td" and "data-key" in found:
            self.key = (str(found["data-key"]), str(found["data-value"]))
            self.text = []
        if tag == "body" and found.get("data-images"):
            self.page.image_widths = [int(w) for w in str(found["data-images"]).split(",")]

    def handle_data(self, data: str) -> None:
        if self.key is not None:
            self.text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self.key is not None:
            self.page.cells[self.key[0]] = (self.key[1], "".join(self.text))
            self.key = None


def open_in_browser(page_path: Path, tmp_path: Path) -> Page:
    """Load ``page_path`` (a probed copy) in headless chromium; the DOM after load and every
    console line it logged."""
    probed = tmp_path / f"probed-{page_path.name}"
    probed.write_text(page_path.read_text().replace("</body>", PROBE, 1))
    argv = [
        require_binary("chromium"),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=5000",
        "--dump-dom",
        probed.as_uri(),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=HANG_GUARD_S, check=True)
    page = Page(console=[ln for ln in done.stderr.splitlines() if ":CONSOLE" in ln])
    _DomReader(page).feed(done.stdout)
    return page


def resolve(document: object, pointer: str) -> object:
    """The value at a JSON pointer (RFC 6901)."""
    value = document
    for raw in pointer.split("/")[1:]:
        part = raw.replace("~1", "/").replace("~0", "~")
        value = value[int(part)] if isinstance(value, list) else value[part]  # type: ignore[index]
    return value


def shown(pointer: str, value: object) -> str:
    """How the page must write a figure, by the unit its key names."""
    if value is None:
        return "–"
    if isinstance(value, str):
        return value
    assert isinstance(value, int | float)
    key = pointer.rsplit("/", 1)[-1]
    if key.endswith("_ratio"):
        return f"{value * 100:.1f}%"
    if key.endswith("_pp"):
        return f"{value:+.1f} pp"
    if key.endswith("_s"):
        return format_duration(value)
    return ""  # plain counts and money: checked through data-value only


def test_the_report_renders_cleanly_and_its_figures_equal_the_json(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    report, output = tmp_path / "report.html", tmp_path / "whatif.json"
    argv: list[str | Path] = ["whatif", "--sacct", DATA / "sacct-24.11.json", "--cluster", "3x8"]
    argv += ["--gpu-hour-price", "2.5", "--report", report, "--output-json", output]
    result = gpuadvisor(capsys, *argv)
    assert result.code == 0, result.err
    document = json.loads(output.read_text())
    page = open_in_browser(report, tmp_path)
    assert page.console == []
    assert page.sources and all(s.startswith("data:image/png;base64,") for s in page.sources)
    assert len(page.image_widths) == 4 and all(w > 0 for w in page.image_widths)
    for pointer, (value, text) in page.cells.items():
        assert json.loads(value) == resolve(document, pointer), pointer
        expected = shown(pointer, resolve(document, pointer))
        if expected:
            assert text == expected, pointer
    policies = len(document["counterfactual"]["policies"])
    required = [
        "/fidelity/observed_allocation_ratio",
        "/fidelity/replayed_allocation_ratio",
        "/fidelity/allocation_delta_pp",
        "/fidelity/observed_wait_p95_s",
        "/fidelity/replayed_wait_mean_s",
        "/fidelity/wait_ks_statistic",
        *(
            f"/counterfactual/policies/{i}/{key}"
            for i in range(policies)
            for key in (
                "allocation_ratio",
                "allocation_gain_pp",
                "gpu_hours_recovered",
                "money_recovered",
                "wait_p95_s",
                "ordering_loss_ratio",
                "fragmentation_loss_ratio",
                "capacity_shortfall_ratio",
                "starvation/jobs_waiting_longer",
            )
        ),
        # every policy kept the same allocation: the waits and slowdown that lead the page
        *(
            f"/headline/policies/{i}/{key}"
            for i in range(len(document["headline"]["policies"]))
            for key in (
                "wait_mean_s",
                "wait_p95_s",
                "wait_max_s",
                "bounded_slowdown_mean",
                "allocation_ratio",
            )
        ),
        "/counterfactual/waits_by/user/observed/alice/wait_mean_s",
        "/counterfactual/waits_by/partition/advisor/gpu/wait_p95_s",
        "/counterfactual/waits_by/size/easy/4/wait_mean_s",
        "/rebuild/jobs_left_queue",
    ]
    assert [p for p in required if p not in page.cells] == []


def test_the_checks_catch_a_console_error_and_an_external_request(tmp_path: Path) -> None:
    control = tmp_path / "control.html"
    control.write_text(
        '<!DOCTYPE html><html><body><img src="http://127.0.0.1:9/x.png">'
        '<script>console.error("broken")</script></body></html>'
    )
    page = open_in_browser(control, tmp_path)
    assert len(page.console) == 1 and '"broken"' in page.console[0]
    assert page.sources == ["http://127.0.0.1:9/x.png"]
    assert page.image_widths == [0]  # it did not load


def test_the_capacity_that_was_there_is_on_the_page_as_in_the_json(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The recorded drain (tests/data/slurm/recorded/README.md) with its node events: the
    capacity table and the waste split's missing part show the JSON's figures."""
    recorded = DATA / "recorded"
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("gpu_model,gpu_capacity_num,cpu_num,node_name\nfake,8,64,gpu01\n")
    report, output = tmp_path / "report.html", tmp_path / "whatif.json"
    argv: list[str | Path] = ["whatif", "--sacct", recorded / "sacct-22.05-drain-parsable2.txt"]
    argv += ["--nodes", nodes, "--node-events", recorded / "sacctmgr-events-22.05-parsable2.txt"]
    argv += ["--since", "1796179100", "--until", "1796179160", "--policies", "fifo,advisor"]
    argv += ["--report", report, "--output-json", output]
    result = gpuadvisor(capsys, *argv)
    assert result.code == 0, result.err
    document = json.loads(output.read_text())
    page = open_in_browser(report, tmp_path)
    assert page.console == []
    for pointer, (value, text) in page.cells.items():
        assert json.loads(value) == resolve(document, pointer), pointer
        expected = shown(pointer, resolve(document, pointer))
        if expected:
            assert text == expected, pointer
    required = [
        "/capacity/mean_present_gpus",
        "/capacity/missing_gpu_hours",
        "/capacity/outages",
        "/counterfactual/policies/0/missing_capacity_ratio",
        "/counterfactual/policies/1/missing_capacity_ratio",
    ]
    assert [p for p in required if p not in page.cells] == []
    assert document["capacity"]["missing_gpu_hours"] == pytest.approx(8 * 4 / 3600)


def test_a_backlogged_record_keeps_the_allocation_headline_on_the_page(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A record made by strict FIFO at an offered load of 1.2: the orders use different shares
    of the cluster, so the page opens with fidelity as it always did, with no waits section."""
    jobs = generate_workload(random.Random(7), jobs=120, cluster_gpus=16, load=1.2)
    whole = [
        replace(j, submit_time_s=round(j.submit_time_s), runtime_s=round(j.runtime_s or 1))
        for j in jobs
    ]
    truth = simulate(whole, Cluster.uniform(2, 8), SimulationConfig(order="fifo"))
    sacct = tmp_path / "sacct.txt"
    sacct.write_text(sacct_text_of(truth, T0))
    report, output = tmp_path / "report.html", tmp_path / "whatif.json"
    argv: list[str | Path] = ["whatif", "--sacct", sacct, "--cluster", "2x8", "--as-run", "fifo"]
    argv += ["--report", report, "--output-json", output]
    result = gpuadvisor(capsys, *argv)
    assert result.code == 0, result.err
    document = json.loads(output.read_text())
    assert document["headline"]["kind"] == "allocation"
    page = open_in_browser(report, tmp_path)
    assert page.console == []
    assert len(page.image_widths) == 4 and all(w > 0 for w in page.image_widths)
    assert not any(pointer.startswith("/headline/") for pointer in page.cells)
    assert "/counterfactual/policies/0/allocation_gain_pp" in page.cells
    html = report.read_text()
    assert "Waits lead" not in html
    assert html.index("<h2>") == html.index("<h2>Fidelity")
