"""The policy files Horizon reads for cyborg's pages."""
import pathlib
import subprocess
import sys

import yaml

from cyborg import policies
from cyborg.dashboard import conf

ROOT = pathlib.Path(__file__).resolve().parents[4]


def test_default_policies_are_the_apis():
    """The shipped dump is current: tools/dashboard_policies.py, with
    Horizon's own dump functions, writes the same file."""
    checked = subprocess.run(
        [sys.executable, str(ROOT / 'tools' / 'dashboard_policies.py'),
         '--check'], capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_horizon_enforces_the_apis_defaults():
    """Horizon's own loader (with the settings the plugin's
    local_settings.d file makes) registers the dump as defaults: an
    administrator may create device profiles, a member may not, as the
    API decides."""
    from openstack_auth import policy as horizon_policy

    horizon_policy.reset()
    try:
        enforcer = horizon_policy._get_enforcer()[conf.SERVICE]
    finally:
        horizon_policy.reset()
    names = {r.name for r in policies.list_policies()}
    assert set(enforcer.registered_rules) == names
    admin = {'roles': ['admin', 'member', 'reader'], 'project_id': 'p1'}
    member = {'roles': ['member', 'reader'], 'project_id': 'p1'}
    target = {'project_id': 'p1'}
    assert enforcer.enforce('cyborg:device_profile:create', target, admin)
    assert not enforcer.enforce('cyborg:device_profile:create', target,
                                member)
    assert enforcer.enforce('cyborg:arq:get_all', target, member)
    assert not enforcer.enforce('cyborg:arq:get_all', {'project_id': 'p2'},
                                member)


def test_overrides_file_is_empty_yaml():
    assert yaml.safe_load(open(conf.POLICY_FILE)) == {}
