"""The v2 API: its version document and its resources."""
from typing import Any

import pecan
from pecan import rest

from cyborg.api.controllers.v2 import arqs
from cyborg.api.controllers.v2 import attach_handles
from cyborg.api.controllers.v2 import attributes
from cyborg.api.controllers.v2 import capacity
from cyborg.api.controllers.v2 import deployables
from cyborg.api.controllers.v2 import device_profiles
from cyborg.api.controllers.v2 import devices
from cyborg.api.controllers.v2 import drivers
from cyborg.api.controllers.v2 import hosts
from cyborg.api.controllers.v2 import services
from cyborg.api.controllers.version_doc import version_document


class V2Controller(rest.RestController):

    device_profiles = device_profiles.DeviceProfilesController()
    accelerator_requests = arqs.ARQsController()
    devices = devices.DevicesController()
    deployables = deployables.DeployablesController()
    attributes = attributes.AttributesController()
    # From a later microversion: root.ROUTES says which.
    services = services.ServicesController()
    drivers = drivers.DriversController()
    hosts = hosts.HostsController()
    capacity = capacity.CapacityController()
    attach_handles = attach_handles.AttachHandlesController()

    @pecan.expose('json')
    def get(self) -> dict[str, Any]:
        return version_document('v2.0')
