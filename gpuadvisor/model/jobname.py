"""Job names as gpuadvisor keeps them: any user types one (``sbatch -J``), so a name is free text
that may carry a line feed, terminal escapes, a bidirectional override, a lone UTF-16 surrogate
(which no UTF-8 output can carry) or a megabyte.

``bounded_job_name`` is the one form every reader and writer of a name uses: the queue sources
(``squeue --json``, queue files), the queue exporter's ``name`` label, the advisor's live state
read back from that label, and the accounting readers (``sacct``) whose history the runtime
predictor learns from. Because each side applies the same function, and it is idempotent, a name
cut or cleaned on its way through Prometheus still matches the same job's name in the history.
"""

from __future__ import annotations

import re
from typing import Final

MAX_JOB_NAME_CHARS: Final = 128
"""Longest job name kept, in characters; a longer one is cut to this length, its last character
an ellipsis (…). Real names are far shorter (scripts, experiment tags; the executables of the
Parallel Workloads Archive logs), and slurmdbd keeps at most 255 bytes of one."""

_UNSHOWN: Final = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]"
)
"""Replaced by U+FFFD: C0 controls (line feed and tab included), DEL, C1 controls, the
bidirectional marks, embeddings, overrides and isolates, the line and paragraph separators, and
lone surrogates (a surrogate pair is combined first)."""

_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def bounded_job_name(text: str) -> str:
    """``text`` as a job name that every sink can carry: surrogate pairs combined into their code
    point, cut at ``MAX_JOB_NAME_CHARS`` with a trailing ``…``, then control characters,
    bidirectional controls, line separators and lone surrogates replaced by U+FFFD (one for
    one). Idempotent; the work is bounded by ``MAX_JOB_NAME_CHARS`` whatever the input's size."""
    if len(text) <= MAX_JOB_NAME_CHARS and text.isascii() and text.isprintable():
        return text
    # Enough code units for MAX_JOB_NAME_CHARS code points, even if each came as a pair.
    head = text[: 2 * MAX_JOB_NAME_CHARS + 2]
    if _SURROGATE.search(head) is not None:
        head = head.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if len(head) > MAX_JOB_NAME_CHARS:
        head = head[: MAX_JOB_NAME_CHARS - 1] + "…"
    return _UNSHOWN.sub("\ufffd", head)
