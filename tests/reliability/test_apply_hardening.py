"""``gpuadvisor apply`` hardened (issue 12, item 13), against real servers on loopback: a
slow-dripping advisor cannot hold a run past ``--http-timeout`` (one deadline for the whole
answer, not per read); an advisor secured as docs/configuration.md recommends (TLS with a client
certificate, basic auth) is reachable through ``--http-config``, the one transport; and exactly
what the advisor emits runs: one job per ``scontrol top``, the recommendation's own job,
``ReqNodeList`` only, ``valid_until`` capped."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gpuadvisor.analysis.advice.reorder import AdviceSettings, advise
from gpuadvisor.analysis.estimates import estimate_runtime
from gpuadvisor.cli import main
from gpuadvisor.model import Cluster, ClusterSnapshot, RunningJob
from gpuadvisor.model.recommendation import Gain, Kind, Recommendation, Severity
from gpuadvisor.services.apply.plan import Policy, Verdict, plan
from gpuadvisor.services.webconfig import web_security
from gpuadvisor.simulation.engine import SimulationConfig, simulate
from gpuadvisor.simulation.generator import generate_workload
from gpuadvisor.sinks.delivery.payload import iso_utc, recommendation_json
from gpuadvisor.sources.advice import parse_recommendations
from tests.analysis.advice.test_advice import head_of_line_snapshot
from tests.builders import make_cluster, make_job, on

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "apply-s3cret"


class Pki:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, both signed by it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def __getitem__(self, name: str) -> str:
        return str(self.folder / name)


def _openssl(folder: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    folder = tmp_path_factory.mktemp("pki")
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl(folder, "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=apply test CA")  # fmt: skip
    for name, subject, ext in (
        ("server", "/CN=127.0.0.1", "subjectAltName=IP:127.0.0.1\n"),
        ("client", "/CN=apply", "extendedKeyUsage=clientAuth\n"),
    ):
        _openssl(folder, "req", "-new", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", subject)  # fmt: skip
        (folder / f"{name}.ext").write_text(ext)
        _openssl(folder, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey",
                 "ca.key", "-CAcreateserial", "-days", "2", "-out", f"{name}.pem",
                 "-extfile", f"{name}.ext")  # fmt: skip
    return Pki(folder)


def recommendation(
    job: str = "5",
    *,
    kind: Kind = Kind.START_NOW,
    commands: tuple[tuple[str, ...], ...] | None = None,
    action: str = "",
    evidence: tuple[tuple[str, str], ...] = (),
    valid_for_s: float = 600.0,
) -> dict[str, Any]:
    rec = Recommendation(
        kind=kind,
        job_id=job,
        node="gpu01",
        action=action or f"Start job {job} now on gpu01.",
        commands=(("scontrol", "top", job),) if commands is None else commands,
        gain=Gain(gpus_busy_now=1.0),
        evidence=evidence,
        severity=Severity.WARNING,
        valid_until_s=time.time() + valid_for_s,
    )
    return recommendation_json(rec)


def document(*recs: dict[str, Any], generated_s: float | None = None) -> bytes:
    body: dict[str, Any] = {"recommendations": list(recs), "trusted": True}
    body["generated_at"] = iso_utc(time.time() if generated_s is None else generated_s)
    return json.dumps(body).encode()


async def run_apply(*args: str, log: Path) -> tuple[int, str, str]:
    """``python -m gpuadvisor apply ARGS`` as cron runs it; the outer limit (120 s) is far
    beyond any ``--http-timeout`` used here and far below what a drip would take."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpuadvisor", "apply", *args, "--log", str(log),
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError("apply still running after 120 s") from None
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


# --- a slow-dripping advisor -------------------------------------------------------------------


class Drip:
    """A loopback HTTP server that answers 200 at once, then sends its body one byte every
    ``interval_s``: every read gets data well within any per-read timeout."""

    def __init__(self, body: bytes, interval_s: float = 0.2) -> None:
        self.body = body
        self.interval_s = interval_s
        self.sent = 0
        self.closed_by_client = asyncio.Event()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(self.body)
        )
        try:
            for i in range(len(self.body)):
                writer.write(self.body[i : i + 1])
                await writer.drain()
                self.sent += 1
                await asyncio.sleep(self.interval_s)
        except (ConnectionError, OSError):
            self.closed_by_client.set()
        finally:
            writer.close()


async def test_http_timeout_bounds_a_slow_drip_answer_as_a_whole(tmp_path: Path) -> None:
    body = document(recommendation("5")) + b" " * 2000  # ~8 minutes at 5 bytes a second
    drip = Drip(body)
    server = await asyncio.start_server(drip.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with server:
            code, out, err = await run_apply(
                "--advisor", f"http://127.0.0.1:{port}", "--http-timeout", "1",
                log=tmp_path / "apply.log",
            )  # fmt: skip
    finally:
        server.close()
    assert code == 2, out + err
    assert "no complete answer within 1s (--http-timeout)" in err
    assert 0 < drip.sent < len(body)  # it was dripping, and was cut off long before the end


# --- an advisor behind TLS with client certificates and basic auth -----------------------------


@pytest.fixture
async def secured(pki: Pki, tmp_path: Path) -> AsyncIterator[str]:
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    web_config = tmp_path / "web.yml"
    web_config.write_text(
        "tls_server_config:\n"
        f"  cert_file: {pki['server.pem']}\n  key_file: {pki['server.key']}\n"
        f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki['ca.pem']}\n"
        f"basic_auth_users:\n  apply: '{hashed}'\n"
    )
    security = web_security(str(web_config))
    body = document(recommendation("5"))

    async def recommendations(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/json")

    app = web.Application(middlewares=list(security.middlewares))
    app.router.add_get("/api/v1/recommendations", recommendations)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server(ssl=security.ssl_context)
    try:
        yield f"https://127.0.0.1:{server.port}"
    finally:
        await server.close()


def http_config(tmp_path: Path, pki: Pki, *, cert: bool = True, auth: bool = True) -> str:
    password = tmp_path / "password"
    password.write_text(PASSWORD + "\n")
    lines = [f"tls:\n  ca_file: {pki['ca.pem']}\n"]
    if cert:
        lines.append(f"  cert_file: {pki['client.pem']}\n  key_file: {pki['client.key']}\n")
    if auth:
        lines.append(f"basic_auth:\n  username: apply\n  password_file: {password}\n")
    path = tmp_path / "http.yml"
    path.write_text("".join(lines))
    return str(path)


async def test_apply_reaches_an_advisor_secured_with_tls_client_certs_and_basic_auth(
    secured: str,
    pki: Pki,
    tmp_path: Path,
) -> None:
    code, out, err = await run_apply(
        "--advisor", secured, "--http-config", http_config(tmp_path, pki),
        log=tmp_path / "apply.log",
    )  # fmt: skip
    assert code == 0, out + err
    assert "would run: scontrol top 5" in out
    assert PASSWORD not in out + err


@pytest.mark.parametrize(
    ("cert", "auth", "message"),
    [(True, False, "HTTP 401"), (False, True, "the advisor")],
)
async def test_without_the_certificate_or_the_password_apply_is_refused(
    secured: str,
    pki: Pki,
    tmp_path: Path,
    cert: bool,
    auth: bool,
    message: str,
) -> None:
    code, out, err = await run_apply(
        "--advisor", secured, "--http-config", http_config(tmp_path, pki, cert=cert, auth=auth),
        log=tmp_path / "apply.log",
    )  # fmt: skip
    assert code == 2, out + err
    assert message in err
    assert "Traceback" not in err


def test_credentials_in_the_advisor_url_are_refused_and_not_echoed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["apply", "--advisor", f"http://apply:{PASSWORD}@127.0.0.1:1", "--log", str(tmp_path / "l")]
    )
    out = capsys.readouterr()
    assert code == 2 and "basic_auth" in out.err
    assert PASSWORD not in out.out + out.err


# --- exactly what the advisor emits ------------------------------------------------------------


def apply_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: bytes, *flags: str
) -> tuple[int, str]:
    path = tmp_path / "recommendations.json"
    path.write_bytes(body)
    code = main(["apply", "--from", str(path), "--log", str(tmp_path / "apply.log"), *flags])
    return code, capsys.readouterr().out


UPDATE = ("--allow-update", "--kinds", "place-on,hold-node")


def update(*fields: str, kind: Kind = Kind.PLACE_ON, job_id: str = "5") -> dict[str, Any]:
    """A recommendation for job 5 whose command is ``scontrol update JobId=JOB_ID FIELDS``."""
    return recommendation(
        "5", kind=kind, commands=(("scontrol", "update", f"JobId={job_id}", *fields),)
    )


def queue_blocked(*tops: str) -> dict[str, Any]:
    """Job 3 heads the queue and names jobs 5 and 6 to top; its commands top ``tops``."""
    return recommendation(
        "3",
        kind=Kind.QUEUE_BLOCKED,
        action="Job 3 (8 GPU) heads the queue; 77 GPUs idle. Jobs 5, 6 fit now.",
        evidence=(("jobs_to_top", "5,6"),),
        commands=tuple(("scontrol", "top", job) for job in tops),
    )


@pytest.mark.parametrize(
    ("rec", "flags", "reason"),
    [
        (update("Priority=0"), UPDATE, "may set only ReqNodeList, not 'Priority=0'"),
        (update("Nice=-10000"), UPDATE, "may set only ReqNodeList"),
        (
            update("ReqNodeList=gpu01", "Priority=0", kind=Kind.HOLD_NODE),
            UPDATE,
            "JobId=<job> and one field",
        ),
        (update("ReqNodeList=gpu01 Priority=0"), UPDATE, "must be a node list"),
        (
            recommendation("5", commands=(("scontrol", "top", "6"),)),
            (),
            "names job 6, the recommendation job 5",
        ),
        (recommendation("5", commands=(("scontrol", "top", "5,6"),)), (), "takes one job"),
        (
            recommendation("5", commands=(("scontrol", "top", "5"), ("scontrol", "top", "5"))),
            (),
            "start-now carries one scontrol top",
        ),
        (
            update("ReqNodeList=gpu01", job_id="9"),
            UPDATE,
            "names job 9, the recommendation job 5",
        ),
        (
            queue_blocked("5", "77"),
            ("--kinds", "queue-blocked"),
            "job 77 is not one this recommendation names",  # though its text has a 77
        ),
        (
            recommendation("5", kind=Kind.RECLAIM_IDLE, commands=(("scontrol", "top", "5"),)),
            ("--kinds", "reclaim-idle"),
            "reclaim-idle carries no scheduler command",
        ),
    ],
)
def test_only_what_the_advisor_emits_runs(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    rec: dict[str, Any],
    flags: tuple[str, ...],
    reason: str,
) -> None:
    code, out = apply_file(tmp_path, capsys, document(rec), "--yes", "--scontrol", "true", *flags)
    assert code == 1, out
    assert "refused: " in out and reason in out


@pytest.mark.parametrize(
    ("rec", "flags", "command"),
    [
        (recommendation("5"), (), "scontrol top 5"),
        (recommendation("5_3"), (), "scontrol top 5_3"),
        (
            update("ReqNodeList=gpu01,gpu02", kind=Kind.HOLD_NODE),
            UPDATE,
            "scontrol update JobId=5 ReqNodeList=gpu01,gpu02",
        ),
        (queue_blocked("5", "6"), ("--kinds", "queue-blocked"), "scontrol top 6"),
    ],
)
def test_what_the_advisor_emits_is_planned(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    rec: dict[str, Any],
    flags: tuple[str, ...],
    command: str,
) -> None:
    code, out = apply_file(tmp_path, capsys, document(rec), *flags)
    assert code == 0, out
    assert f"would run: {command}" in out and "refused" not in out.split("\n\n")[0]


def test_valid_until_is_capped_an_hour_after_the_document_was_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    two_hours_ago = time.time() - 7200
    far = recommendation("5", valid_for_s=30 * 86400)  # claims to hold for a month
    code, out = apply_file(
        tmp_path, capsys, document(far, generated_s=two_hours_ago), "--yes", "--scontrol", "true"
    )
    assert code == 0
    assert "skipped: expired at " in out and "capped" in out
    assert "0 commands ran" in out
    # made a minute ago, the same claim stands (until an hour after it was made)
    code, out = apply_file(
        tmp_path, capsys, document(far, generated_s=time.time() - 60), "--scontrol", "true"
    )
    assert code == 0 and "would run: scontrol top 5" in out


# --- and everything the advisor emits is accepted ----------------------------------------------


def snapshots() -> Iterator[ClusterSnapshot]:
    """Snapshots that make every kind with a command: the head-of-line scenario, a choice of
    node that first-fit and best-fit make differently (``place-on``), and 60 instants of a
    FIFO replay of a seeded synthetic workload on 6 nodes of 8 GPUs (multi-node jobs)."""
    yield head_of_line_snapshot()
    cluster = make_cluster(nodes=2, gpus=8)
    held = (
        RunningJob(make_job("1", gpus=4, runtime=3600.0), 0.0, on(0, 0, 1, 2, 3)),
        RunningJob(make_job("2", gpus=6, runtime=3600.0), 0.0, on(1, 0, 1, 2, 3, 4, 5)),
    )
    yield ClusterSnapshot(60.0, cluster, held, (make_job("3", at=30.0, gpus=2, runtime=600.0),))
    jobs = generate_workload(
        random.Random(3), jobs=300, cluster_gpus=48, load=1.3, job_id_prefix=""
    )
    replay = simulate(jobs, Cluster.parse_shape("6x8/4"), SimulationConfig(order="fifo"))
    end = max(job.submit_time_s for job in jobs)
    for i in range(1, 61):
        yield replay.snapshot_at(end * i / 60)


def test_every_command_the_advisor_emits_passes_the_allow_list() -> None:
    every_kind = Policy(frozenset(str(kind) for kind in Kind), allow_update=True)
    emitted: set[str] = set()
    checked = 0
    for snapshot in snapshots():
        for placement in ("fgd", "best-fit", "topology", "end-fit"):
            recs = advise(snapshot, estimate_runtime, settings=AdviceSettings(placement=placement))
            body = json.dumps(
                {
                    "recommendations": [recommendation_json(r) for r in recs],
                    "generated_at": iso_utc(snapshot.time_s),
                }
            )
            advices = parse_recommendations(body, "advisor")
            for step in plan(advices, every_kind, now_s=snapshot.time_s).steps:
                if step.advice.commands:
                    assert step.verdict is Verdict.RUN, (step.reason, step.advice)
                    emitted.add(step.advice.kind)
                    checked += 1
    assert emitted == {"start-now", "queue-blocked", "hold-node", "place-on"}, emitted
    assert checked > 50  # 95 with this seed
