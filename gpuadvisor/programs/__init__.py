"""The offline programs (``whatif``, ``simulate``, ``demo``) composed: sources → rebuild or
workload → replays → documents → outputs. The CLI parses a command line into a settings object
and calls one runner here (docs/architecture.md, Layers)."""
