"""The interfaces of os-acc's device-half drivers and instance plugins.

An attach is split in two. A *device-half driver* turns an accelerator
request's attach handle into something the host can hand to an instance
(a PCI function bound as asked, an mdev that exists) and undoes that
afterwards. An *instance plugin* turns the prepared handle into what one
hypervisor needs to give it to the instance (libvirt: a ``<hostdev>``
element). Both are loaded by stevedore, from the ``cyborg.os_acc.driver``
and ``cyborg.os_acc.plugin`` namespaces; the entry point's name must be
the class's ``name``.
"""
import abc
from typing import ClassVar

from cyborg.os_acc import objects
from cyborg.os_acc import sysfs as sysfs_lib


class Extension:
    """What drivers and plugins share: a name and the attach-handle
    types they take."""

    #: The entry-point name, recorded in every VAN.
    name: ClassVar[str]
    #: The attach-handle types the extension takes.
    attach_handle_types: ClassVar[frozenset[str]] = frozenset()

    def describe(self) -> objects.ExtensionInfo:
        """Name, types and the first paragraph of the class's docstring."""
        return objects.ExtensionInfo(
            name=self.name,
            attach_handle_types=tuple(sorted(self.attach_handle_types)),
            description=' '.join(
                (self.__doc__ or '').strip().split('\n\n')[0].split()))


class DeviceDriver(Extension, abc.ABC):
    """The device half of some attach-handle types.

    Calls for one instance come one after another; a driver raises
    :class:`~cyborg.os_acc.exception.DeviceError` (or any exception) when
    it cannot do what is asked, and os-acc undoes what it had prepared.
    """

    def __init__(self, sysfs: sysfs_lib.Sysfs) -> None:
        self.sysfs = sysfs

    def can_handle(self, arq: objects.ARQ) -> bool:
        """Whether this driver prepares ``arq``'s attach handle."""
        return arq.attach_handle_type in self.attach_handle_types

    def validate(self, arq: objects.ARQ) -> None:
        """Check ``arq``'s attach-handle info without touching the host;
        ValueError says what is wrong. Called for every request of an
        instance before any is prepared."""

    @abc.abstractmethod
    def prepare_van(self, arq: objects.ARQ) -> objects.VAN:
        """Make ``arq``'s attach handle ready to be given to an instance,
        and return its VAN (see :meth:`new_van`), whose ``device_info``
        records what :meth:`unprepare_van` must undo."""

    def post_plug(self, van: objects.VAN) -> None:
        """Called once every request of the instance is prepared and has
        its instance half: for checks that need all of them in place.
        Raising undoes the whole plug."""

    @abc.abstractmethod
    def unprepare_van(self, van: objects.VAN) -> None:
        """Give ``van``'s attach handle back to the host. It may run in
        another process than :meth:`prepare_van` did, and more than once:
        undoing what is already undone succeeds."""

    def new_van(self, arq: objects.ARQ, **device_info: str) -> objects.VAN:
        """A VAN of ``arq`` prepared by this driver."""
        return objects.VAN.for_arq(arq, self.name, **device_info)


class InstancePlugin(Extension, abc.ABC):
    """The instance half for one kind of hypervisor.

    A plugin for another platform (PowerVM, say) implements :meth:`plug`
    to return what its virt driver needs, as text (XML, JSON), and
    :meth:`unplug` if it keeps any state of its own.
    """

    def supports(self, attach_handle_type: str) -> bool:
        return attach_handle_type in self.attach_handle_types

    @abc.abstractmethod
    def plug(self, instance: objects.Instance,
             van: objects.VAN) -> str | None:
        """What the hypervisor needs to attach ``van`` (prepared) to
        ``instance``; None when there is nothing to attach."""

    def unplug(self, instance: objects.Instance, van: objects.VAN) -> None:
        """Undo :meth:`plug`; by default there is nothing to undo."""

    #: Whether :meth:`attach` and :meth:`detach` work on running guests.
    live: ClassVar[bool] = False

    def check_guest(self, guest: object) -> None:
        """TypeError unless :meth:`attach` and :meth:`detach` take
        ``guest``; called before anything is done."""

    def attach(self, instance: objects.Instance, van: objects.VAN,
               guest: object) -> None:
        """Give ``van``'s device (its ``config``) to ``guest``, the running
        ``instance`` as the hypervisor's API names it (libvirt: its
        ``virDomain``), now and in its persistent definition. Raising
        leaves the guest without it."""
        raise NotImplementedError(f'{self.name} cannot attach to a running '
                                  'instance')

    def detach(self, instance: objects.Instance, van: objects.VAN,
               guest: object) -> None:
        """Take ``van``'s device from ``guest``, now and in its persistent
        definition; raise unless it is gone, since its device half is
        released next."""
        raise NotImplementedError(f'{self.name} cannot detach from a '
                                  'running instance')
