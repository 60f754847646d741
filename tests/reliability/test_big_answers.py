"""Big Prometheus answers (issue 12, item 5): a bound on the bytes of one cycle's answers.

The advisor runs as a subprocess against a Prometheus stand-in on loopback
(``tests/reliability/prometheus_http.py``)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.fake_prometheus import head_of_line
from tests.ports import free_port
from tests.reliability.prometheus_http import serving
from tests.reliability.servers import advisor_yaml, start


async def test_a_cycle_over_max_cycle_bytes_is_untrusted_and_names_the_setting(
    tmp_path: Path,
) -> None:
    fake = head_of_line(time.time())
    async with serving(fake) as prometheus:
        port = free_port()
        config = tmp_path / "advisor.yaml"
        # The head-of-line answers are a few kB in all: 2,000 bytes is over them.
        config.write_text(advisor_yaml(port, prometheus) + "  max_cycle_bytes: 2000\n")
        server = await start(["advisor", "--config", str(config)], tmp_path / "log", port=port)
        try:
            await server.wait_ready()

            async def untrusted() -> bool:
                found = await server.metric('gpuadvisor_advisor_cycles_total{outcome="untrusted"}')
                return (found or 0) >= 2

            await server.wait_until(untrusted)
            _, text = await server.get("/api/v1/recommendations")
            ok = await server.metric('gpuadvisor_advisor_cycles_total{outcome="ok"}')
        finally:
            code = await server.stop()
    log = server.log_text()
    assert code == 0, log
    answer = json.loads(text)
    assert answer["trusted"] is False and answer["recommendations"] == []
    (source,) = (s for s in answer["sources"] if s["source"] == "prometheus")
    assert source["up"] is False
    assert "over 2000 bytes in all (prometheus.max_cycle_bytes)" in source["reason"]
    assert ok == 0
    assert "Traceback" not in log and "MemoryError" not in log
    assert "prometheus.max_cycle_bytes" in log  # the one line saying why advice stopped


async def test_the_same_answers_under_the_default_bound_give_advice(tmp_path: Path) -> None:
    fake = head_of_line(time.time())
    async with serving(fake) as prometheus:
        port = free_port()
        config = tmp_path / "advisor.yaml"
        config.write_text(advisor_yaml(port, prometheus))
        server = await start(["advisor", "--config", str(config)], tmp_path / "log", port=port)
        try:
            await server.wait_ready()

            async def trusted() -> bool:
                found = await server.metric('gpuadvisor_advisor_cycles_total{outcome="ok"}')
                return (found or 0) >= 1

            await server.wait_until(trusted)
        finally:
            code = await server.stop()
    assert code == 0, server.log_text()
