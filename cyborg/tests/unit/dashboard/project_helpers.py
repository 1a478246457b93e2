"""What the Project panels' tests share: Horizon's logged-in test case
with cyborg in the catalog, its database, cyborg's policy and the API's
documented answers."""
import json
import pathlib
from typing import Any

from django.db import connections
from django.test import override_settings
from django.test import utils as test_utils
from openstack_auth import policy as horizon_policy
from openstack_dashboard.test import helpers

from cyborg.dashboard import conf

SAMPLES = (pathlib.Path(__file__).resolve().parents[4]
           / 'doc' / 'source' / 'reference' / 'samples')
ACCELERATOR = {
    'type': conf.SERVICE, 'name': 'cyborg', 'endpoints_links': [],
    'endpoints': [{'region': 'RegionOne', 'interface': interface,
                   'url': 'http://controller:6666/v2'}
                  for interface in ('admin', 'internal', 'public')]}

_database_ready = False


def sample(path: str) -> Any:
    """A documented request or answer of the API, e.g.
    ``device_profiles/device-profiles-list-resp.json``."""
    return json.loads((SAMPLES / path).read_text())


def _prepare_database() -> None:
    """Horizon's test case is Django's: it logs its user in through the
    session and auth tables of Horizon's in-memory SQLite, made once a
    process."""
    global _database_ready
    if _database_ready:
        return
    try:
        test_utils.setup_test_environment()
    except RuntimeError:
        pass  # Already set up by other Django tests of this process.
    connections['default'].creation.create_test_db(verbosity=0)
    _database_ready = True


class TestCase(helpers.TestCase):
    """A project member (roles member and reader) logged in, with cyborg
    in the service catalog. Horizon's policy checks are off, as in
    Horizon's own tests, unless a test enables them (``enforced``)."""

    @classmethod
    def setUpClass(cls) -> None:
        _prepare_database()
        super().setUpClass()

    def _setup_test_data(self) -> None:
        super()._setup_test_data()
        self.service_catalog.append(ACCELERATOR)

    def enforced(self) -> Any:
        """Settings under which Horizon checks cyborg's policy, from the
        files the plugin ships (the test settings name them)."""
        horizon_policy.reset()
        self.addCleanup(horizon_policy.reset)
        return override_settings(
            POLICY_CHECK_FUNCTION='openstack_auth.policy.check')


class AdminTestCase(helpers.BaseAdminViewTests, TestCase):
    """The same, as an administrator of the project."""
