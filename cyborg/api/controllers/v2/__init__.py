"""The v2 API: its version document and its resources."""
from typing import Any

import pecan
from pecan import rest

from cyborg.api import versions
from cyborg.api.controllers import base
from cyborg.api.controllers.v2 import arqs
from cyborg.api.controllers.v2 import attributes
from cyborg.api.controllers.v2 import deployables
from cyborg.api.controllers.v2 import device_profiles
from cyborg.api.controllers.v2 import devices
from cyborg.api.controllers.v2 import drivers
from cyborg.api.controllers.v2 import hosts
from cyborg.api.controllers.v2 import services
from cyborg.api.controllers.version_doc import version_document

# Resources added by a later microversion, and that microversion.
ADDED_IN = {'services': base.OPERATOR_VERSION,
            'drivers': base.OPERATOR_VERSION,
            'hosts': base.OPERATOR_VERSION}


def _asked_version() -> versions.APIVersion:
    """The version the request asks for, read while routing (before the
    microversion hook sets ``request.version``)."""
    try:
        return versions.parse_header(
            pecan.request.headers.get(versions.HEADER))
    except versions.InvalidVersion:
        # Routed as the latest version; the microversion hook then
        # answers 406 before any controller runs.
        return versions.APIVersion(*versions.MAX_VERSION)


class V2Controller(rest.RestController):

    device_profiles = device_profiles.DeviceProfilesController()
    accelerator_requests = arqs.ARQsController()
    devices = devices.DevicesController()
    deployables = deployables.DeployablesController()
    attributes = attributes.AttributesController()
    # See ADDED_IN.
    services = services.ServicesController()
    drivers = drivers.DriversController()
    hosts = hosts.HostsController()

    @pecan.expose('json')
    def get(self) -> dict[str, Any]:
        return version_document('v2.0')

    def _lookup_child(self, remainder: str) -> Any:
        """The child controller named ``remainder``; below the version
        that added it, a 404 like any unknown path's."""
        added_in = ADDED_IN.get(remainder)
        if added_in is not None and not _asked_version().at_least(*added_in):
            pecan.abort(404)
        return super()._lookup_child(remainder)
