"""The REST API: a pecan application served by cyborg-api or a WSGI server."""
