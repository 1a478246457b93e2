"""GET /: the list of API versions, readable without a token; the table
of every path the API serves."""
from typing import Any

import pecan
from pecan import rest

from cyborg.api.controllers import v1
from cyborg.api.controllers import v2
from cyborg.api.controllers.version_doc import legacy_version_document
from cyborg.api.controllers.version_doc import version_document

# Every path the API serves, with its methods; {name} is any one segment.
# HEAD comes with GET, and OPTIONS with every path. The pipeline answers
# 404, 405 and OPTIONS from this table (middleware.routes) before pecan
# routes a request, so it names exactly what the controllers serve: what
# the API reference documents, and test_hostile_input checks.
ROUTES = {
    '/': 'GET',
    '/v1': 'GET',
    '/v1/accelerators': 'GET',
    '/v1/accelerators/{uuid}': 'GET',
    '/v2': 'GET',
    '/v2/accelerator_requests': 'GET POST PATCH DELETE',
    '/v2/accelerator_requests/{uuid}': 'GET PATCH DELETE',
    '/v2/attach_handles': 'GET',
    '/v2/attach_handles/{uuid}/clean': 'POST',
    '/v2/attach_handles/{uuid}/release': 'POST',
    '/v2/attributes': 'GET POST DELETE',
    '/v2/attributes/{uuid}': 'GET DELETE',
    '/v2/capacity': 'GET',
    '/v2/deployables': 'GET',
    '/v2/deployables/{uuid}': 'GET',
    '/v2/deployables/{uuid}/program': 'PATCH',
    # As openstacksdk sends it, the uuid twice.
    '/v2/deployables/{uuid}/program/{again}': 'PATCH',
    '/v2/device_profiles': 'GET POST DELETE',
    '/v2/device_profiles/{uuid_or_name}': 'GET DELETE',
    '/v2/devices': 'GET',
    '/v2/devices/{uuid}': 'GET',
    '/v2/devices/{uuid}/disable': 'POST',
    '/v2/devices/{uuid}/enable': 'POST',
    '/v2/devices/{uuid}/health': 'PUT DELETE',
    '/v2/devices/{uuid}/impact': 'GET',
    '/v2/devices/{uuid}/layout': 'GET PUT DELETE',
    '/v2/drivers': 'GET',
    '/v2/hosts/{host}/discover': 'POST',
    '/v2/hosts/{host}/drivers': 'GET',
    '/v2/hosts/{host}/drivers/reload': 'POST',
    '/v2/hosts/{host}/drivers/{name}/disable': 'POST',
    '/v2/hosts/{host}/drivers/{name}/enable': 'POST',
    '/v2/services': 'GET',
}

# The paths a later microversion added, with the paths below them.
ADDED_IN = {f'/v2/{name}': version for name, version in v2.ADDED_IN.items()}


class RootController(rest.RestController):

    v1 = v1.V1Controller()
    v2 = v2.V2Controller()

    @pecan.expose('json')
    def get(self) -> dict[str, Any]:
        current = version_document('v2')
        return {'name': 'OpenStack Cyborg API',
                'description': 'Cyborg manages the accelerators of an '
                               'OpenStack cloud: discovery, placement and '
                               'attachment to instances.',
                # Clients pick the CURRENT major version they support;
                # v1 is listed for the read-only view it still serves.
                'versions': [current, legacy_version_document()],
                'default_version': current}
