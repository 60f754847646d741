"""The ``whatif --output-json`` document built in one place (simulation/whatif/document.py): its
instants formatted without ``datetime`` exactly as ``datetime`` would, and the HTML's copy of
it (``json_ready``) equal to what the JSON file gives back."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from gpuadvisor.model.availability import Availability
from gpuadvisor.simulation.compare import compare
from gpuadvisor.simulation.engine import SimulationConfig
from gpuadvisor.simulation.whatif.as_run import AUTO, choose_as_run
from gpuadvisor.simulation.whatif.document import utc_text, whatif_document
from gpuadvisor.simulation.whatif.fidelity import UNKNOWABLE
from gpuadvisor.simulation.whatif.rebuild import rebuild
from gpuadvisor.sinks.report.tables import document_json, json_ready
from gpuadvisor.sources.slurm.sacct import read_sacct
from tests.builders import make_cluster

DATA = Path(__file__).parents[2] / "data" / "slurm"


def by_datetime(seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@given(st.floats(min_value=0, max_value=253_402_300_799.0, allow_nan=False))
def test_utc_text_is_what_datetime_writes(seconds: float) -> None:
    assert utc_text(seconds) == by_datetime(seconds)


def test_utc_text_on_the_edges() -> None:
    for seconds in (0.0, 0.9999995, 0.9999994, 951_782_400.0, 4_107_542_399.5, 1764590400.25):
        assert utc_text(seconds) == by_datetime(seconds), seconds


def test_the_html_reads_the_document_as_the_json_file_gives_it_back() -> None:
    with (DATA / "sacct-24.11.json").open("rb") as stream:
        record = read_sacct(stream, source="sacct-24.11.json")
    rebuilt = rebuild(record.jobs)
    cluster = make_cluster(3, 8)
    configs = [SimulationConfig(order=order) for order in ("easy", "fifo", "advisor")]
    by_label = {r.label: r for r in compare(rebuilt.jobs, cluster, configs)}
    document = whatif_document(
        source="sacct-24.11.json",
        record=record,
        rebuilt=rebuilt,
        cluster=cluster,
        as_run=by_label["easy"],
        chosen=[by_label["fifo"], by_label["advisor"]],
        as_run_choice=choose_as_run(AUTO, None, "", missing="sacct does not record it"),
        availability=Availability(),
        capacity_source="the cluster given, all along",
        gpu_hour_price=2.5,
        unknowable=UNKNOWABLE["slurm"],
    )
    assert json_ready(document) == json.loads(document_json(document))
