"""GET /: the list of API versions, readable without a token."""
from typing import Any

import pecan
from pecan import rest

from cyborg.api.controllers import v1
from cyborg.api.controllers import v2
from cyborg.api.controllers.version_doc import legacy_version_document
from cyborg.api.controllers.version_doc import version_document


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
