"""A driver for NVIDIA (Mellanox) ConnectX and BlueField ports on the
mlx5_core kernel driver.

Each physical function (port) is one device, reported as
``sriov_nic.SriovNicDriver`` describes: the port whole while it has no
VFs, one deployable per VF (device 0x101e, "ConnectX Family mlx5Gen
Virtual Function") otherwise, with the port's physical network
(``[nvidia_nic_devices] physical_device_mappings``) in every attach
handle. Besides ``vf_count``, a port's layout may set its eswitch mode
(``eswitch_mode``: ``legacy`` or ``switchdev``) through devlink, which is
the only interface to it (there is no sysfs file). Its health adds the
devlink health reporters of mlx5_core (tx, rx, fw, fw_fatal, vnic) to the
link state and PCI readings, read for all ports at once every
``[nvidia_nic_devices] devlink_health_interval``.
"""
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from oslo_config import cfg

from cyborg.accelerator.drivers import devlink
from cyborg.accelerator.drivers.pci_driver import handle_address
from cyborg.accelerator.drivers.sriov_nic import SriovNicDriver
from cyborg.common import device_health
from cyborg.common import exception
from cyborg.common.device_health import Health
from cyborg.common.device_health import Usage
from cyborg.common.device_report import DriverDevice
from cyborg.common.device_report import check_layout

LOG = logging.getLogger(__name__)

# Physical functions by device id, as mlx5_core's PCI id table names them
# (drivers/net/ethernet/mellanox/mlx5/core/main.c, mlx5_core_pci_table).
# Their VFs are found through the PF's virtfn links.
PRODUCTS = {
    '0x1017': 'ConnectX-5', '0x1019': 'ConnectX-5 Ex',
    '0x101b': 'ConnectX-6', '0x101d': 'ConnectX-6 Dx',
    '0x101f': 'ConnectX-6 Lx', '0x1021': 'ConnectX-7',
    '0x1023': 'ConnectX-8', '0xa2d6': 'BlueField-2',
    '0xa2dc': 'BlueField-3',
}
#: Each mode a port offers, as the ``eswitch_mode`` layout option names
#: it (a map of names, as device_report.check_layout reads it).
ESWITCH_OPTIONS = {mode: 1 for mode in devlink.ESWITCH_MODES}
# The reporter whose error means the firmware stopped answering:
# mlx5_core unloads the device until its recovery (a reset) succeeds
# (health.c, mlx5_fw_fatal_reporter_err_work; "net/mlx5: Unload device
# upon firmware fatal error").
_FATAL_REPORTER = 'fw_fatal'


class NvidiaNicDriver(SriovNicDriver):
    """Reports NVIDIA ConnectX and BlueField ports and their VFs."""

    driver_name = 'nvidia_nic'
    conf_group = 'nvidia_nic_devices'
    vendor_id = '0x15b3'
    device_ids = PRODUCTS
    products = PRODUCTS
    vendor_label = 'NVIDIA'
    trait_vendor = 'NVIDIA'

    def __init__(self, conf: cfg.ConfigOpts,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(conf)
        options = conf.nvidia_nic_devices
        self.devlink = devlink.Devlink(options.devlink_command,
                                       conf.agent.root_helper)
        self.clock = clock
        self._health_lock = threading.Lock()
        self._read_at: float | None = None
        # The last reading, by PCI address, and the (handle, reporter)
        # pairs whose error count grew since the reading before.
        self._reporters: dict[str, list[devlink.Reporter]] = {}
        self._grown: set[tuple[str, str]] = set()

    # Layouts: the eswitch mode (devlink), then the VF count (sysfs).

    def layout_options(self, device: DriverDevice) -> dict[str, Any]:
        """``vf_count``, and ``eswitch_mode`` when devlink reads the
        port's eswitch (it does not on a port that is no eswitch manager,
        such as a BlueField's host port while its Arm cores own the
        eswitch: "Operation not supported")."""
        options = super().layout_options(device)
        if options:
            address = self.control_function(device, 'read layouts')
            try:
                self.devlink.eswitch_mode(address)
            except exception.DeviceActionError as exc:
                self.warn('NVIDIA port %s offers no eswitch_mode layout: '
                          '%s', address, exc)
            else:
                options['eswitch_mode'] = dict(ESWITCH_OPTIONS)
        return options

    def apply_layout(self, device: DriverDevice,
                     layout: dict[str, Any]) -> None:
        """Check the whole layout, set the eswitch mode, then the VF
        count; changing nothing that already is as asked.

        The mode first: it is what mlx5_core may refuse (flows offloaded,
        traps active), and a refusal then leaves the port as it was.
        Current mlx5_core changes the mode with or without VFs; older
        kernels refused switchdev on a port without VFs ("Can't set
        offloads mode, SRIOV legacy not enabled", a check since removed
        from eswitch_offloads.c esw_offloads_start), where the VF count
        is set by a layout of its own first."""
        check_layout(self.layout_options(device), layout)
        mode = layout.get('eswitch_mode')
        if mode is not None:
            self._set_eswitch_mode(
                self.control_function(device, 'set the eswitch mode'), mode)
        rest = {k: v for k, v in layout.items() if k != 'eswitch_mode'}
        if rest:
            super().apply_layout(device, rest)

    def _set_eswitch_mode(self, address: str, mode: str) -> None:
        if self.devlink.eswitch_mode(address) == mode:
            return
        self.devlink.set_eswitch_mode(address, mode)
        now = self.devlink.eswitch_mode(address)
        if now != mode:
            raise exception.DeviceActionError(
                action='set the eswitch mode', device=address,
                reason=f'asked for {mode}, devlink reads {now}')
        LOG.info('NVIDIA port %s now has eswitch mode %s.', address, mode)

    # Monitoring: devlink health reporters besides link and PCI.

    def family_health(self, device: DriverDevice) -> list[Health]:
        """Link state (as every SR-IOV port), then the port's devlink
        health reporters: one in the error state (its recovery failed or
        is not done) makes the port degraded, unhealthy for fw_fatal; an
        error count grown since the previous reading (an error its
        reporter recovered from, e.g. a TX timeout whose queue was
        reopened) makes it degraded until the next reading."""
        found = super().family_health(device)
        for reporter in self.reporters(device):
            key = (reporter.handle, reporter.name)
            if reporter.state != devlink.HEALTHY:
                found.append(Health(
                    device_health.UNHEALTHY
                    if reporter.name == _FATAL_REPORTER
                    else device_health.DEGRADED,
                    f'devlink health reporter {reporter.name} of '
                    f'{reporter.handle} is in state {reporter.state} '
                    f'({reporter.errors} error(s), {reporter.recovers} '
                    'recovered)'))
            elif key in self._grown:
                found.append(Health(
                    device_health.DEGRADED,
                    f'devlink health reporter {reporter.name} of '
                    f'{reporter.handle} reported an error, now recovered '
                    f'({reporter.errors} error(s), {reporter.recovers} '
                    'recovered)'))
        return found

    def family_usage(self, device: DriverDevice) -> Usage | None:
        """Interface counters, and each reporter's error count as
        ``devlink_<reporter>_errors``, summed over the port's device and
        its ports."""
        usage = super().family_usage(device)
        counters = dict(usage.counters) if usage else {}
        for reporter in self.reporters(device):
            key = f'devlink_{reporter.name}_errors'
            counters[key] = counters.get(key, 0) + reporter.errors
        return Usage(counters=counters) if counters else None

    def reporters(self, device: DriverDevice) -> list[devlink.Reporter]:
        """The devlink health reporters of the device's port (its own and
        its devlink ports'), from a reading at most
        devlink_health_interval old; none when devlink cannot be read
        (said once in a warning) or the interval is 0."""
        address = handle_address(device.controlpath_id)
        interval = self.conf.nvidia_nic_devices.devlink_health_interval
        if address is None or interval <= 0:
            return []
        with self._health_lock:
            now = self.clock()
            if self._read_at is None or now - self._read_at >= interval:
                self._read_at = now
                self._read_reporters()
            return list(self._reporters.get(address, ()))

    def _read_reporters(self) -> None:
        try:
            found = self.devlink.health()
        except exception.DeviceActionError as exc:
            self.warn('The devlink health reporters of NVIDIA ports cannot '
                      'be read, so their health stands on link state and '
                      'PCI readings alone: %s', exc)
            self._reporters, self._grown = {}, set()
            return
        before = {(r.handle, r.name): r.errors
                  for reporters in self._reporters.values()
                  for r in reporters}
        by_address: dict[str, list[devlink.Reporter]] = {}
        for reporter in found:
            if reporter.address is not None:
                by_address.setdefault(reporter.address, []).append(reporter)
        self._grown = {(r.handle, r.name) for r in found
                       if r.errors > before.get((r.handle, r.name),
                                                r.errors)}
        self._reporters = by_address
