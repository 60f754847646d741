"""``gpuadvisor whatif --report``: one self-contained HTML file (plots inline as base64 PNG, no
script, no external request) built from the very document ``--output-json`` writes.

Every figure in a table cell carries ``data-key`` (its JSON pointer, RFC 6901, into that
document) and ``data-value`` (the JSON value), so a reader, or a test in a browser, can check
the page against the JSON. Order: where every policy kept the same allocation (the document's
``headline``), the waits and slowdown of each; then fidelity, the counterfactual, the waste split,
allocation over time (observed against the advisor), the wait distributions, the starvation
check, and what the rebuild left out.
"""

from __future__ import annotations

import base64
import html
import json
import math
from collections.abc import Callable, Mapping, Sequence

from gpuadvisor.model.duration import format_duration

MISSING = "–"

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 70em; color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.8em 0; }
th, td { padding: 0.3em 0.8em; border-bottom: 1px solid #e3e3e3; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f4f4f4; }
.verdict { padding: 0.6em 1em; border-radius: 4px; }
.ok { background: #e6f4ea; } .off { background: #fdecea; }
img { max-width: 100%; }
.note { color: #555; font-size: 0.92em; }
"""

Formatter = Callable[[object], str]


def pointer(*parts: str | int) -> str:
    """A JSON pointer (RFC 6901) from its parts."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    return float(value)


def percent(value: object) -> str:
    v = _number(value)
    return f"{v * 100:.1f}%" if math.isfinite(v) else MISSING


def pp(value: object) -> str:
    v = _number(value)
    return f"{v:+.1f} pp" if math.isfinite(v) else MISSING


def duration(value: object) -> str:
    v = _number(value)
    return format_duration(v) if math.isfinite(v) else MISSING


def plain(value: object) -> str:
    v = _number(value)
    if not math.isfinite(v):
        return MISSING
    return f"{v:,.0f}" if v == int(v) else f"{v:,.3g}" if abs(v) < 1 else f"{v:,.2f}"


def _cell(document: Mapping[str, object], path: Sequence[str | int], show: Formatter) -> str:
    value: object = document
    for part in path:
        if isinstance(value, Mapping):
            value = value.get(str(part))
        elif isinstance(value, list) and isinstance(part, int):
            value = value[part]
        else:
            value = None
    data = html.escape(json.dumps(value), quote=True)
    return (
        f'<td data-key="{html.escape(pointer(*path), quote=True)}" data-value="{data}">'
        f"{html.escape(show(value))}</td>"
    )


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _label(text: str) -> str:
    return f"<td>{html.escape(text)}</td>"


def _image(png: bytes | None, alt: str) -> str:
    if png is None:
        return ""
    data = base64.b64encode(png).decode("ascii")
    return f'<p><img alt="{html.escape(alt)}" src="data:image/png;base64,{data}"></p>'


def _headline(doc: Mapping[str, object]) -> str:
    """Where the policies kept the same allocation (``headline.kind`` "waits"), the waits and
    bounded slowdown of each, before anything else; nothing where allocation leads."""
    lead = doc.get("headline")
    if not isinstance(lead, Mapping) or lead.get("kind") != "waits":
        return ""
    rows = []
    for i, entry in enumerate(_list(lead.get("policies"))):
        assert isinstance(entry, Mapping)
        base = ("headline", "policies", i)
        rows.append(
            [
                _label(str(entry["policy"])),
                _cell(doc, (*base, "wait_mean_s"), duration),
                _cell(doc, (*base, "wait_p95_s"), duration),
                _cell(doc, (*base, "wait_max_s"), duration),
                _cell(doc, (*base, "bounded_slowdown_mean"), plain),
                _cell(doc, (*base, "allocation_ratio"), percent),
            ]
        )
    headers = ["policy", "mean wait", "p95 wait", "max wait", "bounded slowdown", "allocation"]
    reason = html.escape(str(lead.get("reason", "")))
    note = (
        '<p class="note">Bounded slowdown: the mean over jobs of max(1, (wait + run) / '
        "max(run, 10 s)). Waits of the replays; the observed waits are under Fidelity.</p>"
    )
    return (
        "<h2>Waits and slowdown lead</h2>"
        f'<p class="headline"><strong>Waits lead</strong>: {reason}.</p>'
        f"{_table(headers, rows)}{note}"
    )


def _fidelity(doc: Mapping[str, object]) -> str:
    f = doc["fidelity"]
    assert isinstance(f, Mapping)
    rows = [
        [
            _label("observed (sacct)"),
            _cell(doc, ("fidelity", "observed_allocation_ratio"), percent),
            _cell(doc, ("fidelity", "observed_wait_mean_s"), duration),
            _cell(doc, ("fidelity", "observed_wait_p95_s"), duration),
        ],
        [
            _label(f"replayed under {f['as_run']}"),
            _cell(doc, ("fidelity", "replayed_allocation_ratio"), percent),
            _cell(doc, ("fidelity", "replayed_wait_mean_s"), duration),
            _cell(doc, ("fidelity", "replayed_wait_p95_s"), duration),
        ],
    ]
    table = _table(["", "allocation", "mean wait", "p95 wait"], rows)
    as_run = doc.get("as_run")
    if isinstance(as_run, Mapping):
        table += (
            f'<p class="as-run">The site\'s own policy is replayed as '
            f"{html.escape(str(as_run['order']))} (from {html.escape(str(as_run['from']))})."
            + (f" {html.escape(str(as_run['warning']))}" if as_run.get("warning") else "")
            + "</p>"
        )
    distance = _table(
        ["", "value"],
        [
            [
                _label("allocation, replayed − observed"),
                _cell(doc, ("fidelity", "allocation_delta_pp"), pp),
            ],
            [
                _label("wait distributions, KS distance (0 same, 1 disjoint)"),
                _cell(doc, ("fidelity", "wait_ks_statistic"), plain),
            ],
        ],
    )
    tolerance = _number(f["tolerance_pp"])
    if f["reproduced"]:
        verdict = (
            f'<p class="verdict ok">The replay reproduces the record within {tolerance:g} pp '
            "of allocation: the counterfactual below stands on a replay that matches reality.</p>"
        )
    else:
        reasons = "".join(f"<li>{html.escape(str(r))}</li>" for r in _list(f["reasons"]))
        verdict = (
            f'<p class="verdict off">The replay does <strong>not</strong> reproduce the record: '
            f"its allocation is off by more than {tolerance:g} pp. Read the counterfactual as a "
            f"comparison of policies on these jobs, not as a forecast. Likely reasons:</p>"
            f"<ul>{reasons}</ul>"
        )
    title = "<h2>Fidelity: does the replay reproduce what happened?</h2>"
    return f"{title}{table}{distance}{_capacity(doc)}{verdict}"


def _capacity(doc: Mapping[str, object]) -> str:
    """The capacity that was there over the window: the allocation's divisor on both sides."""
    c = doc.get("capacity")
    if not isinstance(c, Mapping):
        return ""
    rows = [
        [_label("GPUs there, on average"), _cell(doc, ("capacity", "mean_present_gpus"), plain)],
        [
            _label("GPU-hours missing (nodes down, drained or not scraped)"),
            _cell(doc, ("capacity", "missing_gpu_hours"), plain),
        ],
        [_label("outages"), _cell(doc, ("capacity", "outages"), plain)],
    ]
    note = (
        f'<p class="note">Capacity from {html.escape(str(c.get("source", "")))}. A node out '
        "takes no new job in the replays; jobs already running there run to their end (drain). "
        "Observed and replayed allocation both divide by the capacity that was there.</p>"
    )
    return _table(["capacity", "value"], rows) + note


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _counterfactual(doc: Mapping[str, object]) -> str:
    c = doc["counterfactual"]
    assert isinstance(c, Mapping)
    policies = _list(c["policies"])
    rows = []
    for i, entry in enumerate(policies):
        assert isinstance(entry, Mapping)
        base = ("counterfactual", "policies", i)
        rows.append(
            [
                _label(str(entry["policy"])),
                _cell(doc, (*base, "allocation_ratio"), percent),
                _cell(doc, (*base, "allocation_gain_pp"), pp),
                _cell(doc, (*base, "allocation_gain_vs_observed_pp"), pp),
                _cell(doc, (*base, "gpu_hours_recovered"), plain),
                _cell(doc, (*base, "money_recovered"), plain),
                _cell(doc, (*base, "wait_mean_s"), duration),
                _cell(doc, (*base, "wait_p95_s"), duration),
                _cell(doc, (*base, "starvation", "jobs_waiting_longer"), plain),
            ]
        )
    headers = [
        "policy",
        "allocation",
        f"gain vs {c['baseline']} replay",
        "gain vs observed",
        "GPU-hours recovered",
        "money recovered",
        "mean wait",
        "p95 wait",
        "jobs waiting longer than in reality",
    ]
    note = (
        '<p class="note">Gains and GPU-hours are against the replay under the site\'s own '
        "policy (like against like); money is the GPU-hours at <code>--gpu-hour-price</code> "
        "(– when not given). Allocation is measured the same way everywhere: GPU-seconds held "
        "inside the window / the capacity that was there over it (GPUs × window, less the "
        "GPU-seconds of nodes out).</p>"
    )
    title = "<h2>Counterfactual: the same jobs under other policies</h2>"
    return f"{title}{_table(headers, rows)}{note}"


def _waste(doc: Mapping[str, object], png: bytes | None) -> str:
    c = doc["counterfactual"]
    assert isinstance(c, Mapping)
    rows = []
    for i, entry in enumerate(_list(c["policies"])):
        assert isinstance(entry, Mapping)
        base = ("counterfactual", "policies", i)
        rows.append(
            [
                _label(str(entry["policy"])),
                _cell(doc, (*base, "ordering_loss_ratio"), percent),
                _cell(doc, (*base, "fragmentation_loss_ratio"), percent),
                _cell(doc, (*base, "capacity_shortfall_ratio"), percent),
                _cell(doc, (*base, "missing_capacity_ratio"), percent),
            ]
        )
    headers = ["policy", "ordering", "fragmentation", "capacity", "missing (nodes out)"]
    table = _table(headers, rows)
    note = (
        '<p class="note">Idle GPUs while jobs waited, as a share of the cluster\'s GPUs from '
        "first to last arrival: ordering (a waiting job fitted but was not started), "
        "fragmentation (the free GPUs were too scattered), capacity (not enough GPUs there); "
        "missing: free GPUs of nodes that were out (down, drained, agent not scraped), neither "
        "idle nor allocated. The record itself cannot be split this way: sacct does not say "
        "where each job ran.</p>"
    )
    return f"<h2>Waste split</h2>{table}{note}{_image(png, 'where GPU capacity went')}"


def _waits_by(doc: Mapping[str, object]) -> str:
    c = doc["counterfactual"]
    assert isinstance(c, Mapping)
    by = c["waits_by"]
    assert isinstance(by, Mapping)
    parts = []
    for group, columns in by.items():
        assert isinstance(columns, Mapping)
        labels = list(columns)
        names = sorted({name for col in columns.values() for name in col})
        rows = []
        for name in names:
            row = [_label(name)]
            for label in labels:
                base = ("counterfactual", "waits_by", group, label, name)
                row.append(_cell(doc, (*base, "wait_mean_s"), duration))
                row.append(_cell(doc, (*base, "wait_p95_s"), duration))
            rows.append(row)
        headers = [group] + [f"{label} {k}" for label in labels for k in ("mean", "p95")]
        parts.append(f"<h3>Waits by {html.escape(group)}</h3>{_table(headers, rows)}")
    return "".join(parts)


def _starvation(doc: Mapping[str, object]) -> str:
    c = doc["counterfactual"]
    assert isinstance(c, Mapping)
    parts = []
    for i, entry in enumerate(_list(c["policies"])):
        assert isinstance(entry, Mapping)
        s = entry["starvation"]
        assert isinstance(s, Mapping)
        name = html.escape(str(entry["policy"]))
        exceptions = _list(s["exceptions"])
        if not exceptions:
            parts.append(f"<p><strong>{name}</strong>: no job waits longer than it did.</p>")
            continue
        rows = []
        for k, _ in enumerate(exceptions):
            base = ("counterfactual", "policies", i, "starvation", "exceptions", k)
            rows.append(
                [
                    _cell(doc, (*base, "job_id"), str),
                    _cell(doc, (*base, "observed_wait_s"), duration),
                    _cell(doc, (*base, "wait_s"), duration),
                ]
            )
        total = html.escape(plain(s["jobs_waiting_longer"]))
        parts.append(
            f"<p><strong>{name}</strong>: {total} jobs wait longer than they did; the longest "
            f"extra waits:</p>{_table(['job', 'waited in reality', 'waits here'], rows)}"
        )
    return "<h2>Starvation check</h2>" + "".join(parts)


def _rebuild(doc: Mapping[str, object]) -> str:
    r = doc["rebuild"]
    assert isinstance(r, Mapping)
    rows = [
        [_label("jobs replayed"), _cell(doc, ("rebuild", "jobs_ran"), plain)],
        [
            _label("left the queue before starting (not replayed)"),
            _cell(doc, ("rebuild", "jobs_left_queue"), plain),
        ],
        [
            _label("GPUs they asked for"),
            _cell(doc, ("rebuild", "left_queue_gpus"), plain),
        ],
        [
            _label("eligible after submit (held, dependency, --begin; they arrive then)"),
            _cell(doc, ("rebuild", "eligible_later"), plain),
        ],
        [
            _label("end before start (clock skew; replayed as 0 s)"),
            _cell(doc, ("rebuild", "clock_skew"), plain),
        ],
    ]
    if "censored" in r:
        rows.append(
            [
                _label("still running when read (replayed up to then: a lower bound)"),
                _cell(doc, ("rebuild", "censored"), plain),
            ]
        )
    skipped = r.get("skipped")
    if isinstance(skipped, Mapping):
        for reason in skipped:
            count = _cell(doc, ("rebuild", "skipped", reason), plain)
            rows.append([_label(f"not replayed: {reason}"), count])
    return f"<h2>What the rebuild kept</h2>{_table(['', 'jobs'], rows)}"


def render_report(document: Mapping[str, object], pngs: Mapping[str, bytes]) -> str:
    """The report page. ``document``: the ``--output-json`` document as JSON gives it back
    (``tables.json_ready``: rounded numbers), so page and file show the same figures;
    ``pngs``: ``allocation``, ``waits`` (distributions), ``waits_by_size``, ``waste``."""
    meta = document.get("meta")
    meta = meta if isinstance(meta, Mapping) else {}
    title = "What-if on this cluster's own history"
    subtitle = html.escape(
        f"{meta.get('source', '')}: {meta.get('jobs', '')} jobs on {meta.get('cluster_gpus', '')} "
        f"GPUs, window {meta.get('window_start', '')} to {meta.get('window_end', '')} (UTC)"
    )
    body = "".join(
        (
            f"<h1>{title}</h1><p>{subtitle}</p>",
            _headline(document),
            _fidelity(document),
            _counterfactual(document),
            _waste(document, pngs.get("waste")),
            "<h2>Allocation over time</h2>",
            _image(pngs.get("allocation"), "allocated GPU share over time, observed and advisor"),
            "<h2>Wait distributions</h2>",
            _image(pngs.get("waits"), "wait distributions"),
            _image(pngs.get("waits_by_size"), "waits by job size"),
            _waits_by(document),
            _starvation(document),
            _rebuild(document),
        )
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{title}</title><style>{STYLE}</style></head><body>{body}</body></html>\n"
    )
