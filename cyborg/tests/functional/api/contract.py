"""What the API's responses must be: openapi.yaml and the checks on them.

The document as schemathesis loads it (with the links of
openapi_links.yaml for its stateful phase), and the checks that
fuzzing.py runs on every response, for the suite's fuzz test
(test_openapi.test_schemathesis) and the fuzz tool (tools/fuzz/run.py).
"""
import json
import pathlib
import re
from typing import Any

import schemathesis
import yaml
from schemathesis.config import SchemathesisConfig
from schemathesis.core.failures import Failure
from schemathesis.specs.openapi import checks as openapi_checks

from cyborg.api.controllers import root
from cyborg.api.middleware import routes
from cyborg.api.versions import Microversion

DOCUMENT = (pathlib.Path(__file__).parents[4] / 'doc' / 'source'
            / 'reference' / 'openapi.yaml')
LINKS = pathlib.Path(__file__).with_name('openapi_links.yaml')
VERSION_HEADER = 'OpenStack-API-Version'
# From this microversion on, bad input is a 400: no 500 is documented.
NO_LEGACY_500 = Microversion.STRICT
# The paths of the API, with the microversion each appeared in.
_TABLE = routes.Routes(None, root.ROUTES)


def document(links: bool = True) -> dict[str, Any]:
    """openapi.yaml, with the links of openapi_links.yaml added."""
    with DOCUMENT.open() as f:
        loaded = yaml.safe_load(f)
    if links:
        with LINKS.open() as f:
            for path, methods in yaml.safe_load(f).items():
                for method, statuses in methods.items():
                    responses = loaded['paths'][path][method]['responses']
                    for status, named in statuses.items():
                        responses[status].setdefault('links', {}).update(
                            named)
    return loaded


def load_schema(links: bool = True) -> Any:
    """The document for schemathesis. Reproducers show every value sent
    (the admin token of noauth is no secret); any 4xx rejects invalid
    input (a 413 for a body over the size limit too: whether it is
    documented is status_code_conformance's question)."""
    config = SchemathesisConfig.from_dict({
        'output': {'sanitization': {'enabled': False}},
        'checks': {'negative_data_rejection': {
            'expected-statuses': ['4xx', '5xx']}}})
    return schemathesis.openapi.from_dict(document(links), config=config)


# -- the checks -------------------------------------------------------------

class ServerErrorFailure(Failure):
    """A 5xx the document does not list for the operation and version."""

    kind_title = 'Undocumented server error'


class ErrorBodyFailure(Failure):
    """An error whose body is not the documented JSON."""

    kind_title = 'Error body not in the documented form'


def served_version(response: Any) -> tuple[int, int]:
    """The microversion that served ``response``: its own header, else the
    one asked for, else 2.0."""
    values = (response.headers.get(VERSION_HEADER.lower())
              or [response.request.headers.get(VERSION_HEADER, '')])
    match = re.search(r'(\d+)\.(\d+)', values[0] or '')
    return (int(match[1]), int(match[2])) if match else (2, 0)


def no_undocumented_server_error(ctx: Any, response: Any, case: Any) -> None:
    """No 5xx but those documented for the operation, and no 500 from
    2.4 on: the 500s documented are what 2.0-2.3 clients expect for some
    bad input; the same input gets a 400 from 2.4 on.

    A 503 is documented where the API waits on an agent or placement.
    """
    status = response.status_code
    if status < 500:
        return
    documented = str(status) in case.operation.definition.raw['responses']
    version = served_version(response)
    if documented and not (status == 500 and version >= NO_LEGACY_500):
        return
    raise ServerErrorFailure(
        operation=case.operation.label,
        message=f'{status} at {version[0]}.{version[1]}: '
                f'{response.content[:2000].decode(errors="replace")}')


def error_body(ctx: Any, response: Any, case: Any) -> None:
    """Every 4xx and 5xx has a JSON body {"error_message": "<JSON
    {faultcode, faultstring, debuginfo}>"}, as clients parse it."""
    status = response.status_code
    if status < 400 or response.request.method == 'HEAD':
        return
    problem = _error_body_problem(response)
    if problem:
        raise ErrorBodyFailure(
            operation=case.operation.label,
            message=f'{status}: {problem}; body: '
                    f'{response.content[:500].decode(errors="replace")!r}')


def _error_body_problem(response: Any) -> str | None:
    content_type = (response.headers.get('content-type') or [''])[0]
    if content_type.split(';')[0].strip() != 'application/json':
        return f'Content-Type {content_type!r}'
    try:
        body = json.loads(response.content)
    except ValueError:
        return 'not JSON'
    if not isinstance(body, dict) or not isinstance(
            body.get('error_message'), str):
        return 'no error_message string'
    try:
        fault = json.loads(body['error_message'])
    except ValueError:
        return 'error_message is not a JSON document'
    if not isinstance(fault, dict):
        return 'error_message is not a JSON object'
    if fault.get('faultcode') not in ('Client', 'Server'):
        return f'faultcode {fault.get("faultcode")!r}'
    if not isinstance(fault.get('faultstring'), str):
        return 'no faultstring string'
    if not isinstance(fault.get('debuginfo'), (str, type(None))):
        return 'debuginfo neither a string nor null'
    return None


def unsupported_method(ctx: Any, response: Any, case: Any) -> None:
    """schemathesis's unsupported_method (a 405 with Allow for a method
    the document does not list), but for the resources of a later
    microversion (root.ROUTES) below it: none of their methods exists
    there, a 404 is right."""
    route = _TABLE.match(case.operation.path)
    added_in = route.added_in if route is not None else None
    if (response.status_code == 404 and added_in is not None
            and served_version(response) < added_in):
        return
    openapi_checks.unsupported_method(ctx, response, case)


# What every response must pass: a documented status, headers and body,
# no server error the document does not list, JSON errors.
CHECKS = [no_undocumented_server_error,
          error_body,
          openapi_checks.status_code_conformance,
          openapi_checks.content_type_conformance,
          openapi_checks.response_headers_conformance,
          openapi_checks.response_schema_conformance]
# What the API does with requests the document rules out: a 4xx for
# invalid input (negative_data_rejection), a 405 with Allow for a method
# the document does not list (the coverage phase's probes).
INPUT_CHECKS = [openapi_checks.negative_data_rejection,
                openapi_checks.missing_required_header,
                unsupported_method]
# The stateful phase's, which look back at the requests before: a
# resource just created is there, one just deleted is not.
STATEFUL_CHECKS = [openapi_checks.use_after_free,
                   openapi_checks.ensure_resource_availability]
