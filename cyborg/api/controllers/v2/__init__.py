"""The v2 API: its version document and its resources."""
from typing import Any

import pecan
from pecan import rest

from cyborg.api.controllers.version_doc import version_document


class V2Controller(rest.RestController):

    @pecan.expose('json')
    def get(self) -> dict[str, Any]:
        return version_document('v2.0')
