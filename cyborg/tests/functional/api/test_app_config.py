"""Each app serves with the configuration it was built from, not the
global CONF: two apps of one process, each with its own options."""
import json

import webtest
from oslo_config import cfg

from cyborg import conf as cyborg_conf
from cyborg.api import app
from cyborg.tests.functional.api.fixtures import ADMIN
from cyborg.tests.functional.api.fixtures import version

ENDPOINT = 'https://cloud.example.com/accelerator'


def _private_conf(tmp_path) -> cfg.ConfigOpts:
    """A ConfigOpts of its own, with cyborg's options registered as
    ``cyborg.conf`` registers them on the global one, read from a file."""
    conf = cfg.ConfigOpts()
    cyborg_conf.register_opts(conf)
    policy_file = tmp_path / 'policy.yaml'
    policy_file.write_text('"cyborg:device:get_one": "!"\n')
    config = tmp_path / 'cyborg.conf'
    config.write_text(
        '[api]\n'
        'auth_strategy = noauth\n'
        'max_limit = 1\n'
        'max_groups_per_profile = 1\n'
        'max_accelerators_per_group = 2\n'
        f'public_endpoint = {ENDPOINT}/\n'
        '[oslo_policy]\n'
        f'policy_file = {policy_file}\n')
    conf(['--config-file', str(config)], project='cyborg',
         default_config_files=[])
    return conf


def test_two_apps_each_read_their_own_conf(api, tmp_path):
    api.seed('cmp1', count=3)
    private = webtest.TestApp(app.setup_app(_private_conf(tmp_path)))
    assert cfg.CONF.api.max_limit == 1000
    assert cfg.CONF.api.public_endpoint is None
    latest = version('2.5')

    # [api] max_limit and public_endpoint: the page and its links.
    mine = private.get('/v2/devices?limit=5', headers=latest).json
    [device] = mine['devices']
    assert device['links'] == [
        {'rel': 'self', 'href': f'{ENDPOINT}/v2/devices/{device["uuid"]}'}]
    assert mine['next'].startswith(f'{ENDPOINT}/v2/devices?limit=1&')
    theirs = api.app.get('/v2/devices?limit=5', headers=latest).json
    assert len(theirs['devices']) == 3
    assert 'next' not in theirs
    assert theirs['devices'][0]['links'][0]['href'].startswith(
        'http://localhost/v2/devices/')
    assert private.get('/v2', headers=latest).json['links'] == [
        {'rel': 'self', 'href': f'{ENDPOINT}/v2/'}]

    # [oslo_policy] policy_file: the rules of the app's own enforcer.
    path = f'/v2/devices/{device["uuid"]}'
    private.get(path, headers=ADMIN, status=403)
    api.app.get(path, headers=ADMIN, status=200)

    # [api] max_groups_per_profile: the request body's limit.
    groups = [{'resources:FPGA': '1'}, {'resources:FPGA': '1'}]
    refused = private.post_json('/v2/device_profiles',
                                [{'name': 'dp2', 'groups': groups}],
                                headers=ADMIN, status=400)
    assert 'at most 1 groups' in json.loads(
        refused.json['error_message'])['faultstring']
    api.app.post_json('/v2/device_profiles',
                      [{'name': 'dp2', 'groups': groups}], headers=ADMIN,
                      status=201)

    # [api] max_accelerators_per_group: a limit the body check shares with
    # the database layer.
    group = [{'resources:FPGA': '3'}]
    refused = private.post_json('/v2/device_profiles',
                                [{'name': 'dp3', 'groups': group}],
                                headers=ADMIN, status=400)
    assert 'at most 2 ([api] max_accelerators_per_group)' in json.loads(
        refused.json['error_message'])['faultstring']
    api.app.post_json('/v2/device_profiles',
                      [{'name': 'dp3', 'groups': group}], headers=ADMIN,
                      status=201)
