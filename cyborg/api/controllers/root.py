"""GET /: the list of API versions, readable without a token."""
from typing import Any

import pecan
from pecan import rest

from cyborg.api.controllers import v2
from cyborg.api.controllers.version_doc import version_document


class RootController(rest.RestController):

    v2 = v2.V2Controller()

    @pecan.expose('json')
    def get(self) -> dict[str, Any]:
        current = version_document('v2')
        return {'name': 'OpenStack Cyborg API',
                'description': 'Cyborg manages the accelerators of an '
                               'OpenStack cloud: discovery, placement and '
                               'attachment to instances.',
                'versions': [current],
                'default_version': current}
