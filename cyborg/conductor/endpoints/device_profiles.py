"""RPC endpoint of device profiles: the API's writes (1.1), and who may
use a private profile (1.12)."""
from cyborg.conductor.endpoints import TARGET
from cyborg.conductor.endpoints import expose
from cyborg.db.api import device_profiles


class DeviceProfileEndpoint:
    """Each method is the database function that does the work."""

    target = TARGET

    device_profile_create = staticmethod(expose(device_profiles.create))
    device_profile_delete = staticmethod(expose(device_profiles.delete))
    device_profile_set_public = staticmethod(
        expose(device_profiles.set_public))
    device_profile_add_project = staticmethod(
        expose(device_profiles.add_project))
    device_profile_remove_project = staticmethod(
        expose(device_profiles.remove_project))
