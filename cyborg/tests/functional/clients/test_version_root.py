"""Version discovery from the unversioned root, which lists the
deprecated v1 beside v2: clients still find v2."""
from collections.abc import Iterator

import pytest
from keystoneauth1 import adapter
from keystoneauth1 import noauth
from keystoneauth1 import session as ks_session
from openstack import connection

from cyborg.api import versions

pytestmark = pytest.mark.filterwarnings(
    'ignore::PendingDeprecationWarning:openstack')


@pytest.fixture
def root(live_api) -> str:
    return live_api.url[:-len('/v2')] + '/'


@pytest.fixture
def connect(live_api, root) -> Iterator:
    opened = []

    def connect(**kwargs) -> connection.Connection:
        opened.append(connection.Connection(
            auth_type='admin_token',
            auth={'endpoint': live_api.url, 'token': 'admin'},
            accelerator_endpoint_override=root, **kwargs))
        return opened[-1]

    yield connect
    for conn in opened:
        conn.close()


@pytest.mark.parametrize('microversion', [None, '2.3', '2.5'])
def test_sdk_picks_v2_from_the_root(live_api, connect, root, microversion):
    kwargs = ({'accelerator_default_microversion': microversion}
              if microversion else {})
    conn = connect(**kwargs)
    data = conn.accelerator.get_endpoint_data()
    assert data.url == live_api.url + '/'
    assert data.max_microversion == versions.MAX_VERSION
    live_api.seed('cmp1', hostname='node1')
    assert len(list(conn.accelerator.devices())) == 1
    assert [(s.path, s.status) for s in live_api.seen] == [
        ('/', 200), ('/v2/', 200), ('/v2/devices', 200)]


def test_latest_major_version_is_v2(live_api, root):
    """A client asking for the latest major version gets v2, not v1."""
    session = ks_session.Session(auth=noauth.NoAuth())
    data = adapter.Adapter(
        session, service_type='accelerator', endpoint_override=root,
        min_version='1', max_version='latest').get_endpoint_data()
    assert data.url == live_api.url + '/'
    assert data.api_version == (2, 0)
