"""Hostile strings: what a cluster user can put in a job name, user, account, comment or (outside
Slurm) a job id, shared by every sink test (Slack, Alertmanager templates, webhook, terminal,
CSV). Each sink's one escaping helper is checked against all of them.

``HOSTILE`` maps a short name (the test id) to the string. ``SHORT`` leaves out the 1 MB value,
for tests that go through a real server or a subprocess where a megabyte per case only costs time.
"""

from __future__ import annotations

from typing import Final

ONE_MEGABYTE: Final = 1 << 20

HOSTILE: Final[dict[str, str]] = {
    # Slack: mentions and disguised links (https://api.slack.com/reference/surfaces/formatting)
    "slack-channel": "<!channel>",
    "slack-here": "<!here>",
    "slack-everyone": "<!everyone|everyone>",
    "slack-user": "<@U123>",
    "slack-subteam": "<!subteam^S123|@oncall>",
    "slack-link": "<https://evil.example|click>",
    "slack-ping-and-link": "<!channel> <https://evil.example|click>",
    "slack-half-open": "4711 <https://evil.example",
    # markup: mrkdwn, markdown, HTML and its entities
    "mrkdwn": "*bold* _x_ ~s~ `code` ```block``` > quote",
    "markdown-link": "[click](https://evil.example) ![x](https://evil.example/x.png)",
    "html": "<script>alert(1)</script><b>x</b>",
    "entities": "&amp; &lt;!channel&gt; & &#60; &",
    # terminal control sequences
    "ansi-clear": "\x1b[2J\x1b[H",
    "ansi-colour": "\x1b[31mred\x1b[0m",
    "osc8-link": "\x1b]8;;https://evil.example\x07click\x1b]8;;\x07",
    "osc-title": "\x1b]0;pwned\x07",
    "carriage-return": "4711\rscontrol top 1",
    "backspace": "4711\b\b\b\b1",
    "bell": "\x07\x07",
    "c1-csi": "\x9b31mred",
    "c1-nel": "a\x85b",
    "newline-forged-line": "x\n  would run: scontrol top 1",
    "nul": "a\x00b",
    "tab-vt-ff": "a\tb\x0bc\x0cd",
    "del": "a\x7fb",
    # Unicode that hides or reorders what is shown
    "rtl-override": "job\u202egnp.exe",
    "bidi-isolates": "\u2066a\u2069\u2067b\u2069",
    "zero-width": "a\u200bb\u200cc\u200dd\ufeffe",
    "line-separators": "a\u2028b\u2029c",
    "lone-high-surrogate": "a\ud800b",
    "lone-low-surrogate": "a\udfffb",
    "surrogate-pair-halves": "\ud83d\ude00",
    "astral": "\U0001f600 \u00e9\u0301 \u4e2d\u6587",
    # CSV / spreadsheet formulas (OWASP CSV injection)
    "csv-hyperlink": '=HYPERLINK("https://evil.example","click")',
    "csv-plus-cmd": "+cmd|' /C calc'!A0",
    "csv-minus": "-1+1",
    "csv-at": "@SUM(1+1)",
    "csv-tab": "\t=1+1",
    "csv-cr": "\r=1+1",
    "csv-quoted": "'=1+1",
    "csv-quote-quote": "''x",
    "csv-separators": 'a,b;c"d',
    # size
    "one-megabyte": "<!channel>" + "x" * ONE_MEGABYTE,
}

SHORT: Final[dict[str, str]] = {k: v for k, v in HOSTILE.items() if len(v) < ONE_MEGABYTE}

SLACK_SPECIAL: Final = ("<!", "<@", "<#", "<http")
"""What Slack turns into a mention, a channel link or a link when it reaches mrkdwn raw."""
