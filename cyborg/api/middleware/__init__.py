"""WSGI middleware of the API pipeline."""
