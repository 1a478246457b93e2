"""Fixtures of the API tests."""
from cyborg.tests.functional.api.fixtures import api  # noqa: F401
from cyborg.tests.functional.api.fixtures import api_all_dbs  # noqa: F401
