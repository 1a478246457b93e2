"""A driver for devices that do not exist: FPGA-like, for tests and demos."""
from cyborg.accelerator.drivers.base import AcceleratorDriver
from cyborg.common.device_report import DriverAttachHandle
from cyborg.common.device_report import DriverDeployable
from cyborg.common.device_report import DriverDevice
from cyborg.common.device_report import pci_address

VENDOR_ID = '0xabcd'
PRODUCT_ID = '0xfa4e'
# Up to 200 fake cards per PCI domain, from bus 0x0c upwards.
_BUSES_PER_DOMAIN = 200
_FIRST_BUS = 0x0c


class FakeDriver(AcceleratorDriver):
    """Reports ``[fake_driver] device_count`` FPGA-like cards.

    Each card is one device with one deployable whose accelerators are
    TEST_PCI functions 1..N of the card's slot; Nova ignores TEST_PCI
    handles, so fake devices can be bound but are never passed through.
    """

    driver_name = 'fake'

    def _card_address(self, index: int) -> dict[str, str]:
        domain, bus = divmod(index, _BUSES_PER_DOMAIN)
        return pci_address(f'{domain:04x}', f'{_FIRST_BUS + bus:02x}',
                           '00', '0')

    def _card(self, index: int) -> DriverDevice:
        options = self.conf.fake_driver
        address = self._card_address(index)
        slot = '{domain}:{bus}:{device}.{function}'.format(**address)
        handles = []
        for function_number in range(1, options.accelerators_per_device + 1):
            device, function = divmod(function_number, 8)
            handles.append(DriverAttachHandle(
                attach_type='TEST_PCI',
                attach_info=pci_address(address['domain'], address['bus'],
                                        f'{device:02x}', f'{function:x}')))
        deployable = DriverDeployable(
            name=f'{self.hostname}_{slot}',
            num_accelerators=len(handles),
            driver_name=self.driver_name,
            attributes={'rc': 'FPGA',
                        'trait0': 'CUSTOM_FAKE_DEVICE',
                        'trait1': 'OWNER_CYBORG'},
            attach_handles=handles)
        return DriverDevice(
            type='FPGA', vendor=VENDOR_ID, model='fake-fpga',
            controlpath_id=address,
            std_board_info={'product_id': PRODUCT_ID,
                            'controller': 'Processing accelerators'},
            vendor_board_info={'firmware': 'fake-1.0'},
            deployables=[deployable])

    def discover(self) -> list[DriverDevice]:
        return [self._card(i)
                for i in range(self.conf.fake_driver.device_count)]
