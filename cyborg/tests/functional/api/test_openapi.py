"""doc/source/reference/openapi.yaml against the code and the running API.

The description must be valid OpenAPI 3.1, name exactly the routes the
controllers serve, and describe what the API answers: schemathesis sends
generated requests to every operation at 2.0 and the latest version and
checks the status codes, headers and bodies against it (fuzzing.py and
contract.py, shared with tools/fuzz/run.py, which sends many more).
"""
import inspect
import re
from typing import Any

import jsonschema
import pytest
import requests
import schemathesis
from pecan import rest
from schemathesis.specs.openapi.definitions import OPENAPI_31

from cyborg.accelerator.drivers import fake
from cyborg.agent import service as agent_service
from cyborg.api import versions
from cyborg.api.controllers import v2
from cyborg.api.controllers.v2 import device_profiles
from cyborg.api.controllers.v2 import host_drivers
from cyborg.tests import utils
from cyborg.tests.fakes import fixtures as test_fixtures
from cyborg.tests.functional.api import contract
from cyborg.tests.functional.api import fuzzing
from cyborg.tests.functional.api.fixtures import ADMIN
from cyborg.tests.functional.clients.conftest import live_api  # noqa: F401

METHODS = ('get', 'post', 'put', 'patch', 'delete')
LATEST_VERSION = versions.as_string(versions.MAX_VERSION)
LATEST = {'OpenStack-API-Version': f'accelerator {LATEST_VERSION}'}
# Generated requests per operation, positive and as many negative, and
# walks of the stateful phase, at each version; the coverage cases
# (about 950, the same at every version) at the latest only. Enough to
# reach each documented status, few enough that the module stays under a
# minute; tools/fuzz/run.py sends some 20,000 requests per version.
EXAMPLES = 15
STATEFUL_EXAMPLES = 10


@pytest.fixture(scope='module')
def document() -> dict[str, Any]:
    """openapi.yaml, with the links the stateful phase follows."""
    return contract.document()


def _operations(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {(method.upper(), path)
            for path, item in document['paths'].items()
            for method in METHODS if method in item}


def test_valid_openapi_31(document):
    jsonschema.Draft202012Validator(OPENAPI_31).validate(document)
    # The meta schema leaves the schemas themselves unchecked.
    for schema in document['components']['schemas'].values():
        jsonschema.Draft202012Validator.check_schema(schema)
    ids = [op['operationId'] for path in document['paths'].values()
           for method, op in path.items() if method in METHODS]
    assert len(ids) == len(set(ids))


# What a document operation is served by: (resource, handler), where the
# handler is the controller method pecan's RestController routes it to.
def _handler(method: str, path: str) -> tuple[str, str]:
    resource, *below = path.split('/')[2:]
    if len(below) > 1 and f'{resource}/{below[1]}' in NESTED:
        # A controller below an item: /v2/hosts/{host}/drivers/...
        resource, below = f'{resource}/{below[1]}', below[2:]
    if method == 'GET':
        if len(below) == 2:
            # GET /v2/<resource>/{id}/<action> is a custom action.
            return resource, below[-1]
        return resource, 'get_one' if below else 'get_all'
    if method == 'POST':
        # POST /v2/<resource>/{id}/<action> is a custom action.
        return resource, below[-1] if below else 'post'
    return resource, method.lower()


# Controllers below an item of a resource, which pecan reaches through
# the resource's ``_lookup``.
NESTED = {'hosts/drivers': host_drivers.HostDriversController,
          'device_profiles/projects': device_profiles.ProjectsController}


def _served() -> dict[str, dict[str, bool]]:
    """resource → {handler: whether it also serves the bare collection}.

    A patch or delete whose first argument has a default serves both the
    collection and /{uuid}; custom actions are POST (or GET)
    /{uuid}/<action>.
    """
    served: dict[str, dict[str, bool]] = {}
    controllers = {**vars(v2.V2Controller), **NESTED}
    for name, controller in controllers.items():
        if not (isinstance(controller, rest.RestController)
                or name in NESTED):
            continue
        handlers: dict[str, bool] = {}
        for handler in ('get_all', 'get_one', 'post', 'put', 'patch',
                        'delete'):
            func = getattr(controller, handler, None)
            if func is None:
                continue
            params = [p for p in inspect.signature(func).parameters.values()
                      if p.name != 'body']
            handlers[handler] = (handler in ('patch', 'delete')
                                 and bool(params)
                                 and params[0].default is None)
        for action in getattr(controller, '_custom_actions', {}):
            handlers[action] = False
        served[name] = handlers
    return served


def test_every_route_documented_and_served(document):
    documented = _operations(document)
    v2_ops = {(m, p) for m, p in documented if p.startswith('/v2/')}
    assert documented - v2_ops == {('GET', '/'), ('GET', '/v2'),
                                   ('GET', '/healthcheck')}
    served = _served()
    by_handler: dict[tuple[str, str], set[str]] = {}
    for method, path in v2_ops:
        resource, handler = _handler(method, path)
        assert handler in served.get(resource, {}), (
            f'{method} {path} is documented but no controller serves it')
        shape = 'item' if path.count('/') > 2 else 'collection'
        by_handler.setdefault((resource, handler), set()).add(shape)
    for resource, handlers in served.items():
        for handler, also_collection in handlers.items():
            shapes = by_handler.get((resource, handler))
            assert shapes, f'/v2/{resource} {handler} is not documented'
            if also_collection:
                assert shapes == {'collection', 'item'}, (
                    f'/v2/{resource} {handler} serves the collection and '
                    f'/{{uuid}}; documented: {shapes}')


def _resources(live: Any, seed: bool = True) -> fuzzing.Resources:
    """A resource of each kind, on two devices of host cmp1 (``seed``:
    stored as the conductor stores an agent's report)."""
    if seed:
        live.seed(host='cmp1', count=2)
    resources = fuzzing.Resources(live.url[:-len('/v2')], 'cmp1')
    resources.seed()
    return resources


@pytest.fixture
def agent(live_api, fake_glance):  # noqa: F811
    """cmp1's agent with two fake devices, [glance] at a fake: programs
    and discoveries are answered (with no agent, each program request
    would wait for one)."""
    conf = live_api.conf
    test_fixtures.glance_conf(conf, fake_glance)
    conf.set_override('host', 'cmp1')
    conf.set_override('device_count', 2, 'fake_driver')
    service = agent_service.build(conf, loaded=[fake.FakeDriver(conf)])
    service.start()
    try:
        utils.wait_for(lambda: requests.get(
            live_api.url + '/devices', headers=ADMIN,
            timeout=10).json()['devices'], 'the agent\'s report')
        yield
    finally:
        service.stop()


def _fill(path: str, known: dict[str, str]) -> str:
    resource = path.split('/')[2] if path.count('/') > 1 else ''
    value = known.get(resource, '')
    return re.sub(r'\{[^}]+\}', value, path)


def test_documented_routes_are_routed(document, live_api):  # noqa: F811
    """Each documented operation on existing resources reaches a handler:
    neither 405 nor a routing 404."""
    known = _resources(live_api).ids
    root = live_api.url[:-len('/v2')]
    bodies = {'PATCH': {}, 'POST': {}}
    # Deletes last, so that every other request finds its resource, and
    # what is below a resource before the resource.
    for method, path in sorted(
            _operations(document),
            key=lambda op: (op[0] == 'DELETE', -op[1].count('/'), op)):
        url = root + _fill(path, known)
        response = requests.request(method, url, timeout=30,
                                    headers=dict(ADMIN, **LATEST),
                                    json=bodies.get(method))
        assert response.status_code != 405, (method, path)
        if response.status_code == 404:
            # Only what asks the host's agent may 404 on an existing
            # name: no agent there.
            assert path.startswith('/v2/hosts/{host}/'), (
                method, path, response.text)
            assert 'No cyborg-agent has registered on host cmp1' in (
                response.json()['error_message'])


@pytest.mark.parametrize('version', ['2.0', LATEST_VERSION])
def test_schemathesis(live_api, agent, version):  # noqa: F811
    """Generated requests get documented statuses, headers and bodies,
    JSON errors, and no server error but the 500s documented below 2.4.

    2.0 is sent as Nova sends it, without a version header.
    """
    resources = _resources(live_api, seed=False)
    run = fuzzing.Fuzz(contract.load_schema(), resources.root,
                       None if version == '2.0' else version, resources)
    run.run(EXAMPLES, STATEFUL_EXAMPLES, coverage=version == LATEST_VERSION)
    assert not run.findings, (
        f'{len(run.findings)} distinct failure(s) in {run.session.sent} '
        f'requests:\n{run.report()}')


@pytest.mark.parametrize('version,status', [
    (None, 500), ('accelerator 2.3', 500), ('accelerator 2.4', 400)])
def test_legacy_server_errors(document, live_api, version,  # noqa: F811
                              status):
    """The 500s below 2.4 are documented, with the same error body."""
    root = live_api.url[:-len('/v2')]
    schema = schemathesis.openapi.from_dict(document)
    headers = dict(ADMIN, **({'OpenStack-API-Version': version}
                             if version else {}))
    requests_ = [
        ('POST', '/v2/device_profiles',
         [{'name': '', 'groups': [{'resources:FPGA': '1'}]}]),
        ('POST', '/v2/device_profiles',
         [{'name': 'x' * 256, 'groups': [{'resources:FPGA': '1'}]}]),
        ('POST', '/v2/device_profiles', [{'name': 'nogroups'}]),
        ('POST', '/v2/accelerator_requests', {}),
        ('GET', '/v2/accelerator_requests?bind_state=bound', None),
        ('DELETE', '/v2/accelerator_requests', None),
    ]
    for method, path, body in requests_:
        response = requests.request(method, root + path, json=body,
                                    headers=headers, timeout=30)
        assert response.status_code == status, (method, path,
                                                response.text)
        operation = schema[path.split('?')[0]][method]
        case = operation.Case(headers=headers,
                              **({'body': body} if body else {}))
        case.validate_response(response, checks=contract.CHECKS)
