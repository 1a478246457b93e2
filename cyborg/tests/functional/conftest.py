"""Fixtures shared by the adoption tests (test_adoption*.py).

Here rather than in one test module: a session fixture imported into two
modules is made once for each, and each of these runs upstream's
migrations (tens of seconds on PostgreSQL).
"""
import pytest

from cyborg.tests import conftest
from cyborg.tests.harness import upstream_cyborg


@pytest.fixture(scope='session')
def upstream_templates(tmp_path_factory):
    """backend -> the URL of a database with upstream's empty schema,
    made once per test process; each test gets a copy."""
    made: dict[str, str] = {}
    databases = []

    def template(backend: str) -> str:
        if backend not in made:
            workdir = tmp_path_factory.mktemp(f'upstream-{backend}')
            database = conftest.empty_database_url(backend, workdir)
            made[backend] = next(database)
            databases.append(database)
            upstream_cyborg.schema(made[backend], workdir)
        return made[backend]

    yield template
    for database in databases:
        next(database, None)  # drops it


@pytest.fixture
def upstream_url(backend, empty_db_url, upstream_templates):
    """An empty OpenStack Cyborg 17.0.0 schema (see
    ``upstream_cyborg.schema``)."""
    upstream_cyborg.copy_schema(upstream_templates(backend), empty_db_url)
    return empty_db_url
