"""WSGI entry points for running cyborg under a WSGI server."""
