"""The deprecated v1 API: its version document and a read-only view."""
from typing import Any

import pecan
from pecan import rest

from cyborg.api.controllers.v1 import accelerators
from cyborg.api.controllers.version_doc import legacy_version_document


class V1Controller(rest.RestController):

    accelerators = accelerators.AcceleratorsController()

    @pecan.expose('json')
    def get(self) -> dict[str, Any]:
        return legacy_version_document()
