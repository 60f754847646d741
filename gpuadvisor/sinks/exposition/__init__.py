"""Prometheus expositions: the shared metric definitions, the agent's (with its own text renderer),
the queue exporter's and the advisor's, and the generated docs/metrics.md."""
