"""Django settings of the dashboard's tests: Horizon's own test settings
(no Keystone, no services; API calls are mocked or served on 127.0.0.1)
with cyborg's panels enabled and cyborg's policy loaded, as
``local/enabled`` and ``local/local_settings.d`` enable them on a real
Horizon."""
import socket

from openstack_dashboard import enabled as horizon_enabled
from openstack_dashboard.test.settings import *  # noqa: F403
from openstack_dashboard.test.settings import HORIZON_CONFIG
from openstack_dashboard.test.settings import INSTALLED_APPS
from openstack_dashboard.utils import settings as settings_utils

from cyborg.dashboard import conf as cyborg_conf
from cyborg.dashboard import enabled as cyborg_enabled

# Horizon's test settings call socket.setdefaulttimeout(1) at import. These
# tests run in the suite's processes, where that second would reach every
# socket made later: a test relay's listener then stops accepting after an
# idle second. The dashboard's tests make no network call that needs it.
socket.setdefaulttimeout(None)

INSTALLED_APPS = list(INSTALLED_APPS)
settings_utils.update_dashboards([horizon_enabled, cyborg_enabled],
                                 HORIZON_CONFIG, INSTALLED_APPS)
# Horizon's test settings enabled its own panels already: once each.
# cyborg's application is left as the enabled files add it, so that a
# file naming it twice fails here as it fails a real Horizon.
INSTALLED_APPS = [app for n, app in enumerate(INSTALLED_APPS)
                  if app.startswith('cyborg.')
                  or app not in INSTALLED_APPS[:n]]
HORIZON_CONFIG['plugins'] = list(dict.fromkeys(HORIZON_CONFIG['plugins']))

POLICY_FILES = {cyborg_conf.SERVICE: cyborg_conf.POLICY_FILE}
DEFAULT_POLICY_FILES = {cyborg_conf.SERVICE: cyborg_conf.DEFAULT_POLICY_FILE}
