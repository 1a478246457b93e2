"""Tracing is off by default: requests signed with the configured key
(``[profiler] hmac_keys``) are served as any other, nothing is traced,
and nothing connects to the backend of ``[profiler] connection_string``,
a private Redis server. Installs Debian's ``redis-server`` when missing
(``harness/system_packages.py``)."""
import webtest
from osprofiler import _utils as osprofiler_utils
from osprofiler import profiler as osprofiler
from osprofiler import web

from cyborg.api import app
from cyborg.common import profiler
from cyborg.tests.functional.api.fixtures import ADMIN
from cyborg.tests.harness import redis_server

KEY = 'trace-key'


def test_off_by_default(api, tmp_path):
    with redis_server.running(tmp_path / 'redis') as redis_url:
        checked = redis_server.connections_received(redis_url)
        conf = api.conf
        assert conf.profiler.enabled is False
        conf.set_override('hmac_keys', KEY, 'profiler')
        conf.set_override('connection_string', redis_url, 'profiler')
        assert profiler.setup(conf, 'cyborg-api') is False
        served = webtest.TestApp(app.setup_app(conf))
        api.seed('cmp1', count=2)

        osprofiler.init(KEY)
        try:
            headers = dict(ADMIN, **web.get_trace_id_headers())
        finally:
            osprofiler.clean()
        # Headers the middleware would honour, were it on.
        assert osprofiler_utils.signed_unpack(
            headers[web.X_TRACE_INFO], headers[web.X_TRACE_HMAC],
            [KEY]) is not None

        # Served through the database and, for the profile, the
        # conductor's RPC, as without the headers.
        listed = served.get('/v2/devices', headers=headers).json
        assert len(listed['devices']) == 2
        served.post_json('/v2/device_profiles', [{
            'name': 'dp1', 'groups': [{'resources:FPGA': '1'}]}],
            headers=headers, status=201)
        assert osprofiler.get() is None
        assert profiler.rpc_trace_info() == {}

        # The two connections of these checks, nothing else.
        assert redis_server.connections_received(redis_url) == checked + 1
        assert redis_server.keys(redis_url) == []
