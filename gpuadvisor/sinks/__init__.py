"""Sinks: where results leave gpuadvisor.

Prometheus exposition, Alertmanager, Slack and webhooks for the live advisor; for ``gpuadvisor
simulate`` and ``demo``, the report (JSON contract, terminal tables, progress bar) and the plots.
Sinks render data already computed by model, analysis and simulation; they never import services
or the CLI.
"""
