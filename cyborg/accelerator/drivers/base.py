"""The interface every accelerator driver implements."""
import abc
from typing import ClassVar

from oslo_config import cfg

from cyborg.common.device_report import DriverDevice


class AcceleratorDriver(abc.ABC):
    """A family of devices the agent can discover on its host.

    Drivers are loaded by name from the ``cyborg.accelerator.driver``
    entry-point namespace and constructed with the service configuration.
    ``discover`` must not change the host; it raises on failure rather than
    returning a partial list, because a missing device in a report means
    the device is gone.
    """

    #: The name written into every deployable this driver reports.
    driver_name: ClassVar[str]

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        self.conf = conf

    @property
    def host(self) -> str:
        return self.conf.host

    @property
    def hostname(self) -> str:
        """The compute node's name in placement."""
        return self.conf.agent.hostname or self.conf.host

    @abc.abstractmethod
    def discover(self) -> list[DriverDevice]:
        """Return every device of this family on the host."""
