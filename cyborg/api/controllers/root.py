"""GET /: the list of API versions, readable without a token; the table
of every path the API serves, with its methods and microversion."""
from typing import Any

import pecan
from pecan import rest

from cyborg.api.controllers import v1
from cyborg.api.controllers import v2
from cyborg.api.controllers.version_doc import legacy_version_document
from cyborg.api.controllers.version_doc import version_document
from cyborg.api.versions import Microversion as V

# Every path the API serves: its methods, and the microversion that
# added it (None for v1 and GET /, which have none); {name} is any one
# segment. HEAD comes with GET, and OPTIONS with every path. The one
# declaration of a route: the pipeline answers 404 (below its
# microversion too), 405 with its Allow header and OPTIONS from it
# (middleware.routes) before pecan routes a request, so it names exactly
# what the controllers serve: what the API reference documents, and
# test_hostile_input checks.
ROUTES: dict[str, tuple[str, V | None]] = {
    '/': ('GET', None),
    # Answered by middleware.healthcheck, before authentication.
    '/healthcheck': ('GET', None),
    '/v1': ('GET', None),
    '/v1/accelerators': ('GET', None),
    '/v1/accelerators/{uuid}': ('GET', None),
    '/v2': ('GET', V.INITIAL),
    '/v2/accelerator_requests': ('GET POST PATCH DELETE', V.INITIAL),
    '/v2/accelerator_requests/{uuid}': ('GET PATCH DELETE', V.INITIAL),
    '/v2/attach_handles': ('GET', V.LIFECYCLE),
    '/v2/attach_handles/{uuid}/clean': ('POST', V.LIFECYCLE),
    '/v2/attach_handles/{uuid}/release': ('POST', V.LIFECYCLE),
    '/v2/attributes': ('GET POST DELETE', V.INITIAL),
    '/v2/attributes/{uuid}': ('GET DELETE', V.INITIAL),
    '/v2/capacity': ('GET', V.CAPACITY),
    '/v2/deployables': ('GET', V.INITIAL),
    '/v2/deployables/{uuid}': ('GET', V.INITIAL),
    '/v2/deployables/{uuid}/program': ('PATCH', V.INITIAL),
    # As openstacksdk sends it, the uuid twice.
    '/v2/deployables/{uuid}/program/{again}': ('PATCH', V.INITIAL),
    '/v2/device_profiles': ('GET POST DELETE', V.INITIAL),
    # PATCH from 2.10 (a 406 below it, as for a name below 2.2).
    '/v2/device_profiles/{uuid_or_name}': ('GET PATCH DELETE', V.INITIAL),
    '/v2/device_profiles/{uuid_or_name}/projects': (
        'GET', V.PRIVATE_PROFILES),
    '/v2/device_profiles/{uuid_or_name}/projects/{project_id}': (
        'PUT DELETE', V.PRIVATE_PROFILES),
    '/v2/devices': ('GET', V.INITIAL),
    '/v2/devices/{uuid}': ('GET', V.INITIAL),
    '/v2/devices/{uuid}/disable': ('POST', V.INITIAL),
    '/v2/devices/{uuid}/enable': ('POST', V.INITIAL),
    '/v2/devices/{uuid}/health': ('PUT DELETE', V.HEALTH),
    '/v2/devices/{uuid}/impact': ('GET', V.HEALTH),
    '/v2/devices/{uuid}/layout': ('GET PUT DELETE', V.LIFECYCLE),
    '/v2/drivers': ('GET', V.OPERATOR),
    '/v2/hosts/{host}/discover': ('POST', V.OPERATOR),
    '/v2/hosts/{host}/drivers': ('GET', V.LIFECYCLE),
    '/v2/hosts/{host}/drivers/reload': ('POST', V.LIFECYCLE),
    '/v2/hosts/{host}/drivers/{name}/disable': ('POST', V.LIFECYCLE),
    '/v2/hosts/{host}/drivers/{name}/enable': ('POST', V.LIFECYCLE),
    '/v2/services': ('GET', V.OPERATOR),
}


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
