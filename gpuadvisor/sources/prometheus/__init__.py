"""Prometheus's HTTP API: the client, the named query profiles and the live state rebuilt from
their answers."""
