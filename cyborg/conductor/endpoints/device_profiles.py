"""RPC endpoint of device profiles: the API's writes (1.1)."""
from cyborg.conductor.endpoints import TARGET
from cyborg.conductor.endpoints import expose
from cyborg.db.api import device_profiles


class DeviceProfileEndpoint:
    """Each method is the database function that does the work."""

    target = TARGET

    device_profile_create = staticmethod(expose(device_profiles.create))
    device_profile_delete = staticmethod(expose(device_profiles.delete))
