"""The base of the admin panels' tests: Horizon's logged-in fake
administrator (openstack_dashboard.test.helpers), a catalog with cyborg
in it, and the API's documented answers (doc/source/reference/samples)
for the patched ``cyborg.dashboard.api`` functions."""
import copy
import json
import pathlib
from typing import Any
from unittest import mock

import django

# Horizon's helpers import Django models at import time: Django must be
# set up before, not in the session fixture that runs after collection.
django.setup()

from django.test import utils  # noqa: E402
from openstack_dashboard.test import helpers  # noqa: E402

from cyborg.dashboard import api  # noqa: E402

try:
    # The test client's host ('testserver') and the rendered templates
    # in ``response.context``; once a process.
    utils.setup_test_environment()
except RuntimeError:
    pass

SAMPLES = (pathlib.Path(__file__).resolve().parents[4] / 'doc' / 'source'
           / 'reference' / 'samples')
ENDPOINT = 'http://controller:6666/v2'
CYBORG = {'type': 'accelerator', 'name': 'cyborg', 'endpoints_links': [],
          'endpoints': [{'region': 'RegionOne', 'interface': interface,
                         'url': ENDPOINT}
                        for interface in ('admin', 'internal', 'public')]}


def sample(name: str) -> Any:
    """A documented answer, e.g. ``devices/devices-list-resp.json``."""
    return json.loads((SAMPLES / name).read_text())


def refusal(name: str) -> api.ApiError:
    """The ApiError ``api.call`` raises for a documented error answer."""
    inner = json.loads(sample(name)['error_message'])
    return api.ApiError(409, inner['faultstring'])


class AdminTestCase(helpers.BaseAdminViewTests):
    """A logged-in administrator; ``self.api(name, ...)`` patches one
    function of ``cyborg.dashboard.api``."""
    # The views read no database: no transactions to open.
    databases = frozenset()

    def _setup_test_data(self) -> None:
        super()._setup_test_data()
        self.service_catalog = copy.deepcopy(self.service_catalog) + [CYBORG]

    def api(self, name: str, **kwargs: Any) -> mock.MagicMock:
        patcher = mock.patch.object(api, name, autospec=True, **kwargs)
        self.addCleanup(patcher.stop)
        return patcher.start()

    def messages(self, response: Any) -> list[str]:
        """The messages the (last) page shows."""
        return [str(m) for m in response.context['messages']]
