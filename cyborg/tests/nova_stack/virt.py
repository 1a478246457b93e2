"""Nova's fake virt driver, recording what nova-compute hands it.

nova-compute loads it by its path (``compute_driver =
cyborg.tests.nova_stack.virt.RecordingDriver``). Each spawn and reboot
appends a JSON line to the file ``spawns.LOG_ENV`` names: the
instance, the call, and the ``accel_info`` (the bound accelerator
requests) nova-compute read from cyborg for it. With ``spawns.SYSFS_ENV``
set, a spawn also creates the mdev of each ``MDEV`` handle in that sysfs
tree when it is missing, as Nova 34's libvirt driver does on the host.
"""
import json
import os
import pathlib
from typing import Any

from nova.virt import fake

from cyborg.tests.nova_stack import spawns


class RecordingDriver(fake.FakeDriverWithoutFakeNodes):
    """Nova's fake driver with a stable node identity (its uuid kept in
    the state path, so that nova-compute starts again after a stop), whose
    spawn and reboot record their ``accel_info``."""

    def _record(self, call: str, instance: Any, accel_info: Any) -> None:
        path = os.environ.get(spawns.LOG_ENV)
        if path:
            with open(path, 'a') as log:
                log.write(json.dumps({'call': call,
                                      'instance': instance.uuid,
                                      'host': instance.host,
                                      'accel_info': accel_info or []})
                          + '\n')

    @staticmethod
    def _create_mdevs(accel_info: Any) -> None:
        """Nova 34's libvirt driver: the mdev whose uuid is the handle's,
        created on the parent function with ``asked_type`` unless the
        host has it (Nova then uses the one it made before)."""
        root = os.environ.get(spawns.SYSFS_ENV)
        if not root:
            return
        for arq in accel_info or []:
            if arq.get('attach_handle_type') != 'MDEV':
                continue
            info = arq['attach_handle_info']
            mdev = arq['attach_handle_uuid']
            if (pathlib.Path(root) / 'sys/bus/mdev/devices' / mdev).exists():
                continue
            parent = (f"{info['domain']}:{info['bus']}:{info['device']}."
                      f"{info['function']}")
            (pathlib.Path(root) / 'sys/class/mdev_bus' / parent /
             'mdev_supported_types' / info['asked_type'] / 'create'
             ).write_text(mdev)

    def spawn(self, context: Any, instance: Any, image_meta: Any,
              injected_files: Any, admin_password: Any, allocations: Any,
              network_info: Any = None, block_device_info: Any = None,
              power_on: bool = True, accel_info: Any = None) -> None:
        self._record('spawn', instance, accel_info)
        self._create_mdevs(accel_info)
        super().spawn(context, instance, image_meta, injected_files,
                      admin_password, allocations, network_info,
                      block_device_info, power_on, accel_info)

    def reboot(self, context: Any, instance: Any, network_info: Any,
               reboot_type: str, block_device_info: Any = None,
               bad_volumes_callback: Any = None, accel_info: Any = None,
               share_info: Any = None) -> None:
        self._record(f'reboot-{reboot_type.lower()}', instance, accel_info)
        super().reboot(context, instance, network_info, reboot_type,
                       block_device_info, bad_volumes_callback, accel_info,
                       share_info)
