"""``gpuadvisor check-config``: validate configuration files without starting anything."""

from __future__ import annotations

import argparse
import os
from typing import Any

from gpuadvisor.config.agent import load_agent_config
from gpuadvisor.errors import ConfigError
from gpuadvisor.services.probes import AGENT_CHOICES, sim_spec
from gpuadvisor.services.webconfig import load_web_config


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "check-config",
        help="validate configuration files and exit",
        description="Check configuration files the way the services read them at start-up; "
        "errors name the file, line and field. Exit 0 when every file is valid, 2 otherwise.",
    )
    p.add_argument("--agent", metavar="FILE", help="agent config (gpuadvisor agent --config)")
    p.add_argument("--web", metavar="FILE", help="web config (--web.config.file)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.agent is None and args.web is None:
        raise ConfigError("nothing to check: give --agent FILE and/or --web FILE")
    web_files = [args.web] if args.web else []
    if args.agent is not None:
        config = load_agent_config(args.agent, env=os.environ, choices=AGENT_CHOICES)
        if config.backend == "sim":  # the files it names are read at start-up too
            spec = sim_spec(config)
            shape = f"sim node {spec.node}, {spec.gpus} GPUs"
        else:
            shape = f"backend {config.backend}"
        print(f"{args.agent}: OK ({shape}, listen {config.listen_address})")
        if config.web_config_file and config.web_config_file not in web_files:
            web_files.append(config.web_config_file)
    for path in web_files:
        web = load_web_config(path)
        tls = "TLS" if web.ssl_context is not None else "no TLS"
        # The users' hashes are secrets: only their number is shown.
        print(f"{path}: OK ({tls}, {len(web.basic_auth_users)} basic-auth users)")
    return 0
