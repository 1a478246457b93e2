"""doc/source/reference/openapi.yaml against the code and the running API.

The description must be valid OpenAPI 3.1, name exactly the routes the
controllers serve, and describe what the API answers: schemathesis sends
generated requests to every operation and checks the status codes,
headers and bodies against it.
"""
import inspect
import pathlib
import re
from typing import Any

import hypothesis
import jsonschema
import pytest
import requests
import schemathesis
import yaml
from hypothesis import strategies as st
from pecan import rest
from schemathesis.specs.openapi import checks as openapi_checks
from schemathesis.specs.openapi.definitions import OPENAPI_31

from cyborg.api.controllers import v2
from cyborg.tests.functional.api.fixtures import ADMIN
from cyborg.tests.functional.clients.conftest import live_api  # noqa: F401

DOCUMENT = (pathlib.Path(__file__).parents[4] / 'doc' / 'source'
            / 'reference' / 'openapi.yaml')
METHODS = ('get', 'post', 'put', 'patch', 'delete')
LATEST = {'OpenStack-API-Version': 'accelerator 2.5'}


def no_internal_error(ctx: Any, response: Any, case: Any) -> None:
    """No 500 at 2.5: the legacy 500s are for 2.0-2.3 only.

    Other 5xx are left to status_code_conformance: a 503 is documented
    where the API waits on an agent, and no agent runs here.
    """
    if response.status_code == 500:
        raise AssertionError(f'500 at 2.5: {response.text}')


CHECKS = [no_internal_error,
          openapi_checks.status_code_conformance,
          openapi_checks.content_type_conformance,
          openapi_checks.response_headers_conformance,
          openapi_checks.response_schema_conformance]
# Generated requests per operation: enough to reach each documented
# status, few enough that the whole run stays well under a minute.
EXAMPLES = 12


@pytest.fixture(scope='module')
def document() -> dict[str, Any]:
    with DOCUMENT.open() as f:
        return yaml.safe_load(f)


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
    if method == 'GET':
        return resource, 'get_one' if below else 'get_all'
    if method == 'POST':
        # POST /v2/<resource>/{id}/<action> is a custom action.
        return resource, below[-1] if below else 'post'
    return resource, method.lower()


def _served() -> dict[str, dict[str, bool]]:
    """resource → {handler: whether it also serves the bare collection}.

    A patch or delete whose first argument has a default serves both the
    collection and /{uuid}; custom actions are POST /{uuid}/<action>.
    """
    served: dict[str, dict[str, bool]] = {}
    for name, controller in vars(v2.V2Controller).items():
        if not isinstance(controller, rest.RestController):
            continue
        handlers: dict[str, bool] = {}
        for handler in ('get_all', 'get_one', 'post', 'patch', 'delete'):
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
    assert documented - v2_ops == {('GET', '/'), ('GET', '/v2')}
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


def _seed(live: Any) -> dict[str, str]:
    """A resource of each kind; returns the uuid of each by resource."""
    live.seed(host='cmp1', count=2)
    app = live.app
    profile = live.dp('dp1')
    deployables = app.get('/v2/deployables', headers=ADMIN).json
    deployable = deployables['deployables'][0]
    attribute = app.post_json('/v2/attributes',
                              {'deployable_uuid': deployable['uuid'],
                               'key': 'k1', 'value': 'v1'},
                              headers=ADMIN).json
    arq = app.post_json('/v2/accelerator_requests',
                        {'device_profile_name': 'dp1'},
                        headers=ADMIN).json['arqs'][0]
    device = app.get('/v2/devices', headers=ADMIN).json['devices'][0]
    return {'device_profiles': profile['uuid'],
            'accelerator_requests': arq['uuid'],
            'devices': device['uuid'],
            'deployables': deployable['uuid'],
            'attributes': attribute['uuid'],
            'hosts': 'cmp1'}


def _fill(path: str, known: dict[str, str]) -> str:
    resource = path.split('/')[2] if path.count('/') > 1 else ''
    value = known.get(resource, '')
    return re.sub(r'\{[^}]+\}', value, path)


def test_documented_routes_are_routed(document, live_api):  # noqa: F811
    """Each documented operation on existing resources reaches a handler:
    neither 405 nor a routing 404."""
    known = _seed(live_api)
    root = live_api.url[:-len('/v2')]
    bodies = {'PATCH': {}, 'POST': {}}
    # Deletes last, so that every other request finds its resource.
    for method, path in sorted(_operations(document),
                               key=lambda op: (op[0] == 'DELETE', op)):
        url = root + _fill(path, known)
        response = requests.request(method, url, timeout=30,
                                    headers=dict(ADMIN, **LATEST),
                                    json=bodies.get(method))
        assert response.status_code != 405, (method, path)
        if response.status_code == 404:
            # Only discover may 404 on an existing name: no agent there.
            assert path == '/v2/hosts/{host}/discover', (
                method, path, response.text)
            assert 'cmp1' in response.json()['error_message']


def _run(operation: Any, root: str, known: dict[str, str]) -> None:
    strategy = operation.as_strategy(headers=dict(ADMIN, **LATEST))
    parts = operation.path.split('/')
    resource = parts[2] if len(parts) > 2 else ''

    @hypothesis.settings(max_examples=EXAMPLES, derandomize=True,
                         database=None, deadline=None,
                         suppress_health_check=list(hypothesis.HealthCheck),
                         phases=[hypothesis.Phase.explicit,
                                 hypothesis.Phase.generate])
    @hypothesis.given(case=strategy, existing=st.booleans())
    def run(case: Any, existing: bool) -> None:
        # Half the requests name a resource that exists.
        if existing and case.path_parameters and resource in known:
            first = next(iter(case.path_parameters))
            case.path_parameters[first] = known[resource]
        case.call_and_validate(base_url=root, checks=CHECKS, timeout=30)

    run()


def test_schemathesis(document, live_api):  # noqa: F811
    """Generated requests at 2.5 get documented statuses, headers and
    bodies, and never a server error."""
    known = _seed(live_api)
    # No agent runs: programming an FPGA fails (503) after this long.
    live_api.conf.set_override('bind_timeout', 1, 'conductor')
    root = live_api.url[:-len('/v2')]
    schema = schemathesis.openapi.from_dict(document)
    failures = []
    for result in schema.get_all_operations():
        operation = result.ok()
        try:
            _run(operation, root, known)
        except Exception as exc:  # every operation's failures, not one
            failures.append(f'{operation.method.upper()} {operation.path}:'
                            f' {exc}')
    assert not failures, '\n\n'.join(failures)


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
        case.validate_response(response, checks=[
            openapi_checks.status_code_conformance,
            openapi_checks.content_type_conformance,
            openapi_checks.response_schema_conformance])
