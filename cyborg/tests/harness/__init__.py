"""Processes and emulations the tests drive: servers, clusters, hosts."""
