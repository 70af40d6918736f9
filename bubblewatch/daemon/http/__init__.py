"""The metrics endpoint: a bounded HTTP/TLS server for scrapes."""
