"""The receiver's side of the webhook has a short public home (``gpuadvisor.webhook``) that the
docs name, and the path the docs gave before the sinks were grouped by edge
(``gpuadvisor.sinks.webhook``) still imports, with a ``DeprecationWarning``."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import gpuadvisor.sinks.delivery.webhook as sink
from gpuadvisor.webhook import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign, verify_signature

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "webhook.md"
SECRET = "whsec-test-0123456789"
BODY = b'{"event":"firing"}'

OLD_IMPORT = """
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    from gpuadvisor.sinks.webhook import sign, verify_signature
signature = sign("{secret}", "1700000000", {body!r})
print(json.dumps({{
    "verified": verify_signature("{secret}", "1700000000", {body!r}, signature, now_s=1700000010),
    "warnings": [[w.category.__name__, str(w.message)] for w in caught],
}}))
"""


def test_the_public_home_verifies_what_the_sink_signs() -> None:
    assert verify_signature is sink.verify_signature and sign is sink.sign
    assert (TIMESTAMP_HEADER, SIGNATURE_HEADER) == (sink.TIMESTAMP_HEADER, sink.SIGNATURE_HEADER)
    signature = sink.sign(SECRET, "1700000000", BODY)
    assert verify_signature(SECRET, "1700000000", BODY, signature, now_s=1_700_000_010)
    assert not verify_signature(SECRET, "1700000000", BODY + b" ", signature, now_s=1_700_000_010)


def test_the_old_documented_import_works_and_warns() -> None:
    """In a fresh interpreter, so that no earlier import hides the warning."""
    code = OLD_IMPORT.format(secret=SECRET, body=BODY)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": path},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["verified"] is True
    deprecations = [w for w in result["warnings"] if w[0] == "DeprecationWarning"]
    assert len(deprecations) == 1, result["warnings"]
    assert "gpuadvisor.webhook" in deprecations[0][1]


def test_every_python_name_the_webhook_doc_gives_imports() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert "`gpuadvisor.webhook.verify_signature(" in text
    names = set(re.findall(r"`(gpuadvisor(?:\.\w+)+)", text))
    assert names, "docs/webhook.md names no Python path"
    for name in sorted(names):
        module_name, _, attribute = name.rpartition(".")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # the alias: checked above
            try:
                module = importlib.import_module(name)
            except ModuleNotFoundError:
                module = importlib.import_module(module_name)
                assert hasattr(module, attribute), f"docs/webhook.md names {name}: not there"
