"""The caching enforcer decides as oslo.policy does, and sees changes."""
import http.server
import threading

import pytest
from oslo_config import cfg
from oslo_policy import policy as oslo_policy

from cyborg import context as cyborg_context
from cyborg import policies
from cyborg.api import policy

RULE = 'cyborg:device_profile:get_all'


@pytest.fixture
def conf(tmp_path):
    conf = cfg.ConfigOpts()
    conf([], project='cyborg', default_config_files=[])
    policy.set_defaults(conf)
    conf.set_override('policy_file', str(tmp_path / 'policy.yaml'),
                      'oslo_policy')
    return conf


def _enforcer(conf, recheck=0.0):
    enforcer = policy.Enforcer(conf, recheck=recheck)
    enforcer.register_defaults(policies.list_policies())
    return enforcer


def _ctx(roles, project='p1'):
    return cyborg_context.RequestContext(
        user_id='u1', project_id=project, roles=roles)


def _target(ctx):
    return {'project_id': ctx.project_id, 'user_id': ctx.user_id}


@pytest.mark.parametrize('roles', [['reader'], ['member', 'reader'],
                                   ['admin', 'member', 'reader'], []])
def test_decisions_are_oslo_policys(conf, roles):
    ours = _enforcer(conf)
    theirs = oslo_policy.Enforcer(conf)
    theirs.register_defaults(policies.list_policies())
    ctx = _ctx(roles)
    for rule in [r.name for r in policies.list_policies()]:
        expected = theirs.enforce(rule, _target(ctx), ctx)
        # Twice: the second answer comes from the cache.
        assert ours.allowed(rule, _target(ctx), ctx) is bool(expected)
        assert ours.allowed(rule, _target(ctx), ctx) is bool(expected)


def test_a_changed_policy_file_is_seen(conf, tmp_path):
    enforcer = _enforcer(conf)
    ctx = _ctx(['reader'])
    assert enforcer.allowed(RULE, _target(ctx), ctx)
    (tmp_path / 'policy.yaml').write_text(f'"{RULE}": "role:admin"\n')
    assert not enforcer.allowed(RULE, _target(ctx), ctx)
    (tmp_path / 'policy.yaml').write_text(f'"{RULE}": "role:reader"\n')
    assert enforcer.allowed(RULE, _target(ctx), ctx)


def test_files_are_looked_at_again_only_after_recheck(conf, tmp_path):
    enforcer = _enforcer(conf, recheck=3600)
    ctx = _ctx(['reader'])
    assert enforcer.allowed(RULE, _target(ctx), ctx)
    (tmp_path / 'policy.yaml').write_text(f'"{RULE}": "role:admin"\n')
    assert enforcer.allowed(RULE, _target(ctx), ctx)
    enforcer.load_rules(force_reload=True)
    assert not enforcer.allowed(RULE, _target(ctx), ctx)


def test_the_key_holds_every_credential():
    reader = _ctx(['reader'])
    other = _ctx(['reader'], project='p2')
    keys = {policy._frozen(RULE, _target(reader), c.to_policy_values())
            for c in (reader, other, _ctx(['admin']))}
    assert len(keys) == 3
    assert policy._frozen(RULE, {'x': {'a': 1}}, {}) is None


def test_rules_that_call_out_are_not_cached(conf, tmp_path):
    answers = iter(['True', 'False', 'True'])

    class Decider(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers['Content-Length']))
            body = next(answers).encode()
            self.send_response(200)
            self.send_header('Content-Length', str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(('127.0.0.1', 0), Decider)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        (tmp_path / 'policy.yaml').write_text(
            f'"{RULE}": "http://127.0.0.1:{server.server_port}/decide"\n')
        enforcer = _enforcer(conf)
        ctx = _ctx(['reader'])
        assert [enforcer.allowed(RULE, _target(ctx), ctx)
                for _ in range(3)] == [True, False, True]
        assert enforcer._decisions == {}
    finally:
        server.shutdown()
        server.server_close()
