"""Django, configured once per process for the dashboard's tests.

They need Horizon (the ``dashboard`` extra, which tox's environments
install). Without it they are left out, or the run fails under
CYBORG_TEST_REQUIRE_SERVICES=1.
"""
import importlib.util
import os

import pytest

HORIZON = importlib.util.find_spec('openstack_dashboard') is not None

if not HORIZON:
    collect_ignore_glob = ['*.py']

os.environ.setdefault('DJANGO_SETTINGS_MODULE',
                      'cyborg.tests.unit.dashboard.settings')


def pytest_configure(config: pytest.Config) -> None:
    if not HORIZON:
        if os.environ.get('CYBORG_TEST_REQUIRE_SERVICES') == '1':
            raise pytest.UsageError(
                "The dashboard's tests need Horizon: pip install "
                "-e '.[dashboard]'.")
        return
    # Before collection: the panels' test modules import Horizon's
    # modules, which define Django models at import time.
    import django
    django.setup()
