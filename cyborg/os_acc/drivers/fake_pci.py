"""The device half of TEST_PCI attach handles, which Cyborg's fake driver
reports: the address is checked, nothing on the host is touched."""
from cyborg.os_acc import base
from cyborg.os_acc import objects


class FakePciDriver(base.DeviceDriver):
    """The fake driver's TEST_PCI functions, which do not exist."""

    name = 'test_pci'
    attach_handle_types = frozenset({'TEST_PCI'})

    def validate(self, arq: objects.ARQ) -> None:
        objects.PciAddress.from_info(arq.attach_handle_info)

    def prepare_van(self, arq: objects.ARQ) -> objects.VAN:
        address = objects.PciAddress.from_info(arq.attach_handle_info)
        return self.new_van(arq, address=str(address))

    def unprepare_van(self, van: objects.VAN) -> None:
        """Nothing was changed on the host."""
