"""RPC endpoint of the drivers managed per host (1.9)."""
from cyborg.conductor import host_drivers
from cyborg.conductor.endpoints import TARGET
from cyborg.conductor.endpoints import expose


class HostDriverEndpoint:
    """Each method is ``host_drivers.HostDrivers``'."""

    target = TARGET

    def __init__(self, drivers: host_drivers.HostDrivers) -> None:
        self.host_drivers_list = expose(drivers.installed)
        self.host_driver_set_enabled = expose(drivers.set_enabled)
        self.host_drivers_reload = expose(drivers.reload)
