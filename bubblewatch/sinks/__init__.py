"""Where results go: the Prometheus exporter and alert webhooks."""
