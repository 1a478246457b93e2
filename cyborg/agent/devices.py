"""What acting on this host's devices takes, for the RPC endpoints and
the agent's start-up work alike: the driver by name, one lock per
device, an FPGA image from Glance, the report after a change."""
import logging
import os
import threading
from typing import Any

import oslo_messaging as messaging
from oslo_config import cfg

from cyborg.accelerator.drivers.base import AcceleratorDriver
from cyborg.agent import cache as agent_cache
from cyborg.agent import driver_control as agent_drivers
from cyborg.agent import layouts
from cyborg.agent import resource_tracker
from cyborg.common import exception
from cyborg.common import glance_client
from cyborg.common.device_report import DriverDevice
from cyborg.common.device_report import canonical_json

LOG = logging.getLogger(__name__)


class HostDevices:
    """This host's drivers and devices, as the agent acts on them.

    The device-side actions that succeed are recorded in the tracker's
    cache (``cyborg.agent.cache``).
    """

    def __init__(self, conf: cfg.ConfigOpts,
                 tracker: resource_tracker.ResourceTracker,
                 glance: glance_client.GlanceClient | None = None,
                 drivers: agent_drivers.DriverControl | None = None
                 ) -> None:
        self.conf = conf
        self.tracker = tracker
        self._drivers = drivers
        self.glance = glance or glance_client.GlanceClient(conf)
        self._device_locks: dict[str, threading.Lock] = {}
        self._device_locks_guard = threading.Lock()

    @property
    def cache(self) -> agent_cache.AgentCache:
        return self.tracker.cache

    @property
    def bitstream_dir(self) -> str:
        """Where downloaded bitstreams are kept, and found again."""
        return os.path.join(self.conf.state_path, 'bitstreams')

    @property
    def driver_control(self) -> agent_drivers.DriverControl:
        """The control of this agent's drivers; made on first use when
        the agent was assembled with drivers built by hand."""
        if self._drivers is None:
            self._drivers = agent_drivers.DriverControl.adopt(
                self.conf, self.tracker)
        return self._drivers

    def driver(self, driver_name: str, action: str,
               device: str) -> AcceleratorDriver:
        """The loaded driver named; DeviceActionError naming those loaded
        when there is none."""
        loaded = [type(d).driver_name for d in self.tracker.drivers]
        for driver in self.tracker.drivers:
            if type(driver).driver_name == driver_name:
                return driver
        raise exception.DeviceActionError(
            action=action, device=device,
            reason=f'no driver named {driver_name!r} is loaded on host '
                   f'{self.conf.host} (loaded: {", ".join(loaded)})')

    def layout_driver(self, driver_name: str | None,
                      controlpath_id: dict[str, str], action: str
                      ) -> tuple[AcceleratorDriver, DriverDevice]:
        """The driver named, or (None: a device partitioned down to no
        deployable, which names no driver) the one that discovers the
        device; with the device as it discovers it now."""
        device = canonical_json(controlpath_id)
        if driver_name is not None:
            driver = self.driver(driver_name, action, device)
            return driver, layouts.find_device(driver, controlpath_id)
        for driver in self.tracker.drivers:
            try:
                return driver, layouts.find_device(driver, controlpath_id)
            except exception.DeviceActionError:
                continue
        raise exception.DeviceActionError(
            action=action, device=device,
            reason=f'no driver loaded on host {self.conf.host} discovers '
                   'the device')

    def lock(self, device: str) -> threading.Lock:
        """The lock of one device (``canonical_json`` of its address):
        two changes of a device never overlap."""
        with self._device_locks_guard:
            return self._device_locks.setdefault(device, threading.Lock())

    def resolve_layout(self, layout: dict[str, Any]) -> dict[str, Any]:
        """The layout with the file of its FPGA region image, as
        ``program`` takes it; Invalid naming an image Glance lacks."""
        if 'region_image' not in layout:
            return dict(layout)
        try:
            bitstream = self.glance.get_image(layout['region_image'])
        except exception.BitstreamNotFound as exc:
            raise exception.Invalid(
                reason=f'region_image: {exc} Give the id of an FPGA image '
                       'in the image service.') from None
        try:
            path = self.glance.download(bitstream, self.bitstream_dir)
        except exception.BitstreamError as exc:
            raise exception.DeviceActionError(
                action='download the region image', device=bitstream.id,
                reason=str(exc)) from exc
        return dict(layout, image_path=path, bitstream=bitstream.to_dict())

    def report(self) -> bool:
        """Report now, so that the device's new traits reach placement."""
        try:
            self.tracker.update(force=True)
        except (exception.CyborgException,
                messaging.MessagingException) as exc:
            LOG.warning('Inventory report after a device change failed '
                        '(%s); the next periodic report will carry it.',
                        exc)
            return False
        return True
