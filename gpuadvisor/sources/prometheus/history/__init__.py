"""Prometheus history for ``gpuadvisor whatif --prometheus``: long stretches read a chunk at a
time and summed up into past jobs, nodes and outages (the live reads are the advisor's)."""
