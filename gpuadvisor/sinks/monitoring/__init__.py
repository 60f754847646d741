"""What gpuadvisor gives Prometheus and Grafana to load: the alert and recording rules (with your
targets' selectors and runbook address), a Prometheus-operator ``PrometheusRule``, the Grafana
dashboards and the ConfigMaps Grafana's dashboard sidecar loads. The sources are package data
(``gpuadvisor/data/alerts``, ``gpuadvisor/data/grafana``), read by ``shipped``; ``rules``,
``dashboards`` and ``manifest`` turn text into text and touch no file."""
