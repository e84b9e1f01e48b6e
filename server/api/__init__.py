"""What every API shares: the catalog (one entry per API), the request context
handlers receive, and the typed error a handler raises to refuse a request."""
