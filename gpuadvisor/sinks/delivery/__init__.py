"""Advice delivered out of process: the outbox, the HTTP sinks (Alertmanager, Slack, webhook) and
the JSON form of a recommendation."""
