"""The agent's flags layered over ``--config`` and ``GPUADVISOR_AGENT_*`` (docs/configuration.md).

Precedence: flags > environment > file > defaults. To tell a flag given on the command line from
one left at its default, the defaults of the flags that ``gpuadvisor.config.agent.SETTINGS``
knows are replaced by ``argparse.SUPPRESS`` (a flag left out is then absent from the namespace);
``apply_agent_config`` merges the layers and writes every value back into the namespace, so the
rest of ``gpuadvisor agent`` reads ``args`` as before. Flags the config does not know are left
alone. The argparse defaults are kept and must equal ``AgentConfig``'s (a test checks).
"""

from __future__ import annotations

import argparse
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from gpuadvisor.config.agent import SETTINGS_BY_FLAG, AgentConfig, load_agent_config

LAYERING = "agent_config_layering"
"""The namespace attribute that carries a ``Layering`` from the parser to ``run``."""


@dataclass(frozen=True, slots=True)
class Layering:
    dests: Mapping[str, str]
    """argparse dest → ``AgentConfig`` field."""
    defaults: Mapping[str, object]
    """argparse dest → the flag's own default (used where the config's value is None)."""
    choices: Mapping[str, Collection[str]]
    """``AgentConfig`` field → the flag's choices."""


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """Add ``--config`` (and the ``--web.*`` security flags); call after every other flag."""
    parser.add_argument(
        "--config",
        dest="config_file",
        metavar="FILE",
        default=None,
        help="YAML file with the agent's settings; flags and GPUADVISOR_AGENT_* variables "
        "override it (docs/configuration.md)",
    )
    known = {option for action in parser._actions for option in action.option_strings}
    if "--web.config.file" not in known:
        parser.add_argument(
            "--web.config.file",
            dest="web_config_file",
            metavar="FILE",
            default="",
            help="exporter-toolkit web config: TLS, client certificates, basic auth",
        )
    if "--web.max-requests" not in known:
        parser.add_argument(
            "--web.max-requests",
            dest="web_max_requests",
            type=int,
            default=40,
            help="concurrent /metrics requests beyond which the agent answers 503; 0: no limit "
            "(default 40)",
        )
    dests: dict[str, str] = {}
    defaults: dict[str, object] = {}
    choices: dict[str, Collection[str]] = {}
    for action in parser._actions:
        settings = [SETTINGS_BY_FLAG[o] for o in action.option_strings if o in SETTINGS_BY_FLAG]
        if not settings:
            continue
        dests[action.dest] = settings[0].field
        defaults[action.dest] = action.default
        if action.choices is not None:
            choices[settings[0].field] = tuple(action.choices)
        action.default = argparse.SUPPRESS
    parser.set_defaults(**{LAYERING: Layering(dests, defaults, choices)})


def apply_agent_config(
    args: argparse.Namespace, env: Mapping[str, str] | None = None
) -> AgentConfig:
    """Merge flags given, ``env`` (``os.environ`` when None), ``--config`` and defaults; write the
    result back into ``args`` and return it."""
    layering: Layering = getattr(args, LAYERING)
    flags = {field: getattr(args, dest) for dest, field in layering.dests.items() if dest in args}
    config = load_agent_config(args.config_file, env=env, flags=flags, choices=layering.choices)
    for dest, field in layering.dests.items():
        value = getattr(config, field)
        setattr(args, dest, value if value is not None else layering.defaults[dest])
    return config
