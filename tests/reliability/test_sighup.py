"""SIGHUP reloads the configuration in all three servers, as Prometheus does: a valid one
takes effect, an invalid one is logged and leaves the running one in force
(``gpuadvisor_config_last_reload_successful`` 0), and the process never dies of the signal
(it used to: exit 129)."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.ports import free_port
from tests.reliability.servers import (
    Server,
    advisor_args,
    advisor_yaml,
    agent_args,
    queue_args,
    start,
)

RELOAD_OK = "gpuadvisor_config_last_reload_successful"


async def reloaded(server: Server, ok: bool) -> None:
    server.signal(signal.SIGHUP)

    async def done() -> bool:
        return await server.metric(RELOAD_OK) == (1.0 if ok else 0.0)

    await server.wait_until(done)


async def test_the_agent_reloads_its_config_file_and_keeps_it_when_the_new_one_is_bad(
    tmp_path: Path,
) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text("sim:\n  node: node-a\n")
    port = free_port()
    server = await start(agent_args(port, f"--config={config}"), tmp_path / "log", port=port)

    async def serves(node: str) -> bool:
        return f'node="{node}"' in (await server.get("/metrics"))[1]

    try:
        await server.wait_until(lambda: serves("node-a"), "serves node-a")
        config.write_text("sim:\n  node: node-b\n")
        server.signal(signal.SIGHUP)
        await server.wait_until(lambda: serves("node-b"), "serves node-b")
        assert await server.metric(RELOAD_OK) == 1.0
        config.write_text("sim:\n  node: node-c\n  gpus: many\n")
        await reloaded(server, ok=False)
        assert await serves("node-b")  # the old configuration stays in force
        config.write_text("sim:\n  node: node-c\n")
        await reloaded(server, ok=True)
        await server.wait_until(lambda: serves("node-c"), "serves node-c")
    finally:
        code = await server.stop()
    log = server.log_text()
    assert code == 0, log
    assert "configuration reload failed; the running configuration stays" in log
    assert "agent.yaml, line 3" in log  # the error names file and line


async def test_the_queue_exporter_reloads_its_web_config_and_keeps_it_when_bad(
    tmp_path: Path,
) -> None:
    web = tmp_path / "web.yml"
    web.write_text("basic_auth_users: {}\n")
    port = free_port()
    args = queue_args(port, tmp_path, f"--web.config.file={web}")
    server = await start(args, tmp_path / "log", port=port)
    try:
        await server.wait_ready()
        web.write_text("tls_server_config: {cert_file: /nonexistent.pem}\n")
        await reloaded(server, ok=False)
        assert (await server.get("/-/healthy"))[0] == 200
        web.write_text("basic_auth_users: {}\n")
        await reloaded(server, ok=True)
        assert (await server.get("/-/ready"))[0] in (200, 503)
    finally:
        code = await server.stop()
    assert code == 0, server.log_text()
    assert "web.yml" in server.log_text()


async def test_the_advisor_reloads_its_config_and_keeps_it_when_bad(tmp_path: Path) -> None:
    port, prometheus = free_port(), free_port()
    server = await start(advisor_args(port, tmp_path, prometheus), tmp_path / "log", port=port)
    config = tmp_path / "advisor.yaml"
    try:
        await server.wait_ready()
        config.write_text(advisor_yaml(port, prometheus) + "hysteresis:\n  hold_cycles: x\n")
        await reloaded(server, ok=False)
        assert (await server.get("/-/healthy"))[0] == 200
        config.write_text(advisor_yaml(port, prometheus, interval="0.3s"))
        await reloaded(server, ok=True)
        await server.wait_ready()  # the new app has run a cycle
        config.write_text(advisor_yaml(free_port(), prometheus))
        await reloaded(server, ok=False)  # the listen address changes only at a restart
    finally:
        code = await server.stop()
    log = server.log_text()
    assert code == 0, log
    assert "advisor.yaml, line" in log
    assert "the listen address changes only at a restart" in log
