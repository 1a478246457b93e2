"""os-acc: the library a compute host calls to attach accelerators.

No released Nova calls it: Nova 34's libvirt driver reads the bound
requests through its own cyborg client and writes the ``<hostdev>``
elements itself. It serves a virt driver or host agent written to use
it, and anything that attaches accelerators to guests it manages.

Call :func:`initialize` once, then :func:`plug` with all of an instance's
bound accelerator requests before the guest is built, and :func:`unplug`
with the VANs ``plug`` returned once the guest is gone::

    from cyborg import os_acc

    os_acc.initialize()
    vans = os_acc.plug(instance, arqs)
    ...  # add each van.config to the guest, keep the VANs
    os_acc.unplug(instance, vans)

To a running instance, :func:`attach` gives the requests bound to it
afterwards (API microversion 2.9), and :func:`detach` takes some back,
each with the guest as the hypervisor's API names it (libvirt: the
``virDomain``)::

    vans = os_acc.attach(instance, new_arqs, guest=domain)
    ...
    os_acc.detach(instance, vans, guest=domain)

``instance`` is Nova's Instance, or anything else with a ``uuid``
(:class:`InstanceInfo`).
"""
import logging
import threading
from collections.abc import Iterable
from collections.abc import Sequence
from typing import Any
from typing import TypeVar

import stevedore

from cyborg.os_acc import base
from cyborg.os_acc import client as client_lib
from cyborg.os_acc import exception
from cyborg.os_acc import manager as manager_lib
from cyborg.os_acc import objects
from cyborg.os_acc import sysfs

DRIVER_NAMESPACE = 'cyborg.os_acc.driver'
PLUGIN_NAMESPACE = 'cyborg.os_acc.plugin'

InstanceInfo = objects.InstanceInfo
VAN = objects.VAN

LOG = logging.getLogger(__name__)
_E = TypeVar('_E', bound=base.Extension)

_manager: manager_lib.Manager | None = None
_lock = threading.Lock()


def _load(namespace: str, kind: str, cls: type[_E],
          names: Iterable[str] | None, **kwargs: sysfs.Sysfs) -> list[_E]:
    """Instances of the ``cls`` extensions ``names`` (all when None) of
    ``namespace``; LoadFailed on an unknown name or a broken one."""

    def failed(manager: object, entry_point: object,
               exc: BaseException) -> None:
        raise exception.LoadFailed(kind=kind,
                                   name=getattr(entry_point, 'name', '?'),
                                   reason=str(exc)) from exc

    def missing(names: Iterable[str]) -> None:
        raise exception.LoadFailed(
            kind=kind, name=', '.join(sorted(names)),
            reason=f'no such entry point in {namespace}')

    extensions: stevedore.ExtensionManager[Any]
    if names is None:
        extensions = stevedore.ExtensionManager(
            namespace, on_load_failure_callback=failed)
    else:
        extensions = stevedore.NamedExtensionManager(
            namespace, list(names), name_order=True,
            on_load_failure_callback=failed,
            on_missing_entrypoints_callback=missing)
    loaded = []
    for found in extensions:
        extension = found.plugin(**kwargs)
        if not isinstance(extension, cls):
            raise exception.LoadFailed(
                kind=kind, name=found.name,
                reason=f'it is not a {cls.__name__}')
        if extension.name != found.name:
            raise exception.LoadFailed(
                kind=kind, name=found.name,
                reason=f'its class calls itself {extension.name!r}')
        loaded.append(extension)
    return loaded


def initialize(reset: bool = False, sysfs_root: str = '/',
               drivers: Iterable[str] | None = None,
               plugins: Iterable[str] | None = None) -> None:
    """Load the device-half ``drivers`` and instance ``plugins`` (by
    default every one installed), the drivers working on the sysfs under
    ``sysfs_root``. Calling it again does nothing unless ``reset``."""
    global _manager
    with _lock:
        if _manager is not None and not reset:
            return
        # mypy takes an abstract class for a concrete one (python/mypy
        # issue 4717); these are only used for isinstance checks.
        _manager = manager_lib.Manager(
            _load(DRIVER_NAMESPACE, 'driver',
                  base.DeviceDriver,  # type: ignore[type-abstract]
                  drivers, sysfs=sysfs.Sysfs(sysfs_root)),
            _load(PLUGIN_NAMESPACE, 'plugin',
                  base.InstancePlugin,  # type: ignore[type-abstract]
                  plugins))
        LOG.debug('os-acc drivers: %s; plugins: %s',
                  ', '.join(_manager.drivers), ', '.join(_manager.plugins))


def _loaded() -> manager_lib.Manager:
    if _manager is None:
        raise exception.NotInitialized()
    return _manager


def plug(instance: objects.Instance, arqs: Sequence[object] | None = None,
         client: client_lib.Client | None = None,
         plugin: str = 'libvirt') -> list[objects.VAN]:
    """Attach every accelerator request of ``instance``: prepare each
    device half, then have ``plugin`` make each instance half.

    ``arqs`` are the requests as the API returns them (Nova's client
    gives those); without them they are read through ``client``. Every
    request must be Bound to the instance. Returns one VAN per request,
    in order, each with the plugin's ``config``. If anything fails, what
    was prepared is undone, newest first, and PlugFailed names the
    request and the cause; a request that cannot be plugged as it is
    raises InvalidARQ before anything is prepared.
    """
    manager = _loaded()
    if arqs is None:
        if client is None:
            raise TypeError('plug needs the requests or a client to read '
                            'them with')
        arqs = client.resolved_arqs(instance.uuid)
    return manager.plug(instance, arqs, plugin)


def unplug(instance: objects.Instance, vans: Sequence[objects.VAN]) -> None:
    """Release ``vans`` (from :func:`plug`, or ``VAN.from_dict`` of what
    was kept), newest first. Every VAN is tried; UnplugFailed names those
    that could not be released."""
    _loaded().unplug(instance, vans)


def attach(instance: objects.Instance, arqs: Sequence[object],
           guest: object, plugin: str = 'libvirt') -> list[objects.VAN]:
    """Give ``arqs``, bound to the running ``instance``, to its ``guest``:
    prepare each device half, have ``plugin`` make each instance half,
    then attach each to the guest, now and in its persistent definition.

    Returns one VAN per request, as :func:`plug` does; keep them for
    :func:`detach` or :func:`unplug`. If anything fails, the devices
    this call attached are detached again and what it prepared is
    undone, newest first, and AttachFailed names the request, the step
    and the cause (and anything that could not be undone). A request
    that cannot be attached as it is raises InvalidARQ, and a plugin
    that cannot attach to running guests NotLive, before anything is
    done.
    """
    return _loaded().attach(instance, arqs, plugin, guest)


def detach(instance: objects.Instance,
           vans_or_arqs: Sequence[objects.VAN | object], guest: object,
           plugin: str = 'libvirt') -> None:
    """Take devices from the running ``instance``'s ``guest``, then
    release them, newest first.

    Each of ``vans_or_arqs`` is a VAN from :func:`plug` or :func:`attach`,
    or, when it was not kept, the Bound request as the API returns it:
    ``plugin`` then describes its device afresh, and the device half is
    left as it is (what it changed is recorded only in the VAN). Every
    one is tried; DetachFailed names those the guest kept (still attached
    and prepared) or whose device half could not be released. Unbind the
    requests in Cyborg afterwards.
    """
    _loaded().detach(instance, vans_or_arqs, plugin, guest)


def host_info() -> objects.HostInfo:
    """The loaded drivers and plugins, and the attach-handle types each
    takes."""
    return _loaded().host_info()
