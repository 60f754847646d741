"""HTTP client settings shared by the sources and the sinks that speak HTTP (Prometheus,
Alertmanager, Slack, webhooks): TLS, basic and bearer auth with secrets given inline, from an
environment variable (both resolved once) or from a file (read again for every request, so a
rotated secret is picked up), static headers, timeouts and response size limits; one SSL-context
builder, one ``Authorization`` builder and one session owner. Imports only ``gpuadvisor.errors``,
the standard library and aiohttp."""
