"""The v2 API: its version document and its resources."""
from typing import Any

import pecan
from pecan import rest

from cyborg.api.controllers import base
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

# Resources, or paths of a resource, added by a later microversion, and
# that microversion: below it, every such path is a 404 (see root.ROUTES).
# The longest prefix of a path counts (hosts/{host}/drivers is 2.8 where
# hosts is 2.5).
ADDED_IN = {'services': base.OPERATOR_VERSION,
            'drivers': base.OPERATOR_VERSION,
            'hosts': base.OPERATOR_VERSION,
            'devices/{uuid}/health': base.HEALTH_VERSION,
            'devices/{uuid}/impact': base.HEALTH_VERSION,
            'devices/{uuid}/layout': base.LIFECYCLE_VERSION,
            'capacity': base.CAPACITY_VERSION,
            'hosts/{host}/drivers': base.LIFECYCLE_VERSION,
            'attach_handles': base.LIFECYCLE_VERSION}


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
    capacity = capacity.CapacityController()
    attach_handles = attach_handles.AttachHandlesController()

    @pecan.expose('json')
    def get(self) -> dict[str, Any]:
        return version_document('v2.0')
