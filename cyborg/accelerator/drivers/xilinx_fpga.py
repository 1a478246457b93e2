"""A driver for Xilinx Alveo cards (U200, U250, U280, U50, U55C, ...).

An Alveo card shows two physical functions in one PCI slot, both of class
"Processing accelerators": the management function (bound to
``xclmgmt``), through which the card is programmed, and the user function
(bound to ``xocl``), through which applications run. The card is one
device named after its management function, which is its control path
and nothing else: programming addresses it with XRT's ``xbmgmt``
(``[fpga] xbmgmt_path`` and ``xbmgmt_args``), and no instance ever gets
it. The device's one deployable holds one accelerator whose attach
handles are the user functions only, so a bind hands out a user function
whichever handle it takes. A slot showing no user function (its shell
not loaded) is reported with no accelerator until one appears.
"""
from typing import Any

from oslo_config import cfg

from cyborg.accelerator import pci
from cyborg.accelerator.drivers import fpga_common
from cyborg.accelerator.drivers import pci_report
from cyborg.accelerator.drivers.pci_driver import Functions
from cyborg.common.device_report import DriverDeployable
from cyborg.common.device_report import DriverDevice

MANAGEMENT_DRIVER = 'xclmgmt'


def management_function(functions: list[pci.PciFunction]
                        ) -> pci.PciFunction:
    """The management function among one slot's functions: the one bound
    to xclmgmt, else (no driver bound yet) the lowest-numbered one."""
    return next((f for f in functions if f.driver == MANAGEMENT_DRIVER),
                functions[0])


class XilinxFpgaDriver(fpga_common.FpgaDriver):
    """Xilinx Alveo cards: the management and user functions of a slot as
    one device, programmed with xbmgmt through the management function.
    """

    driver_name = 'xilinx_fpga'
    vendor_id = '0x10ee'
    class_prefixes = (pci.PROCESSING_ACCELERATOR,)
    physical_only = True
    noun = 'card'

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        super().__init__(conf)
        self.program_command = fpga_common.ProgramCommand(
            conf, 'xbmgmt_path', 'xbmgmt_args')

    def devices(self, matching: list[pci.PciFunction], functions: Functions
                ) -> list[DriverDevice | None]:
        slots: dict[tuple[str, str, str], list[pci.PciFunction]] = {}
        for function in matching:
            slots.setdefault((function.domain, function.bus,
                              function.device), []).append(function)
        return [self._card(slot) for slot in slots.values()]

    def _card(self, functions: list[pci.PciFunction]) -> DriverDevice:
        mgmt = management_function(functions)
        users = [f for f in functions if f is not mgmt]
        if not users:
            self.warn('Xilinx card %s shows no user function; it offers no '
                      'accelerator until one appears.', mgmt.address)
        traits = ['OWNER_CYBORG', 'CUSTOM_FPGA_XILINX',
                  fpga_common.product_trait(mgmt)]
        # One accelerator, whichever user function a bind hands out. The
        # management function is no attach handle: passed through, it
        # would take from the host the path that programs and resets the
        # card, and give an instance control of the card's shell.
        deployable = DriverDeployable(
            name=mgmt.deployable_name(self.hostname),
            num_accelerators=1 if users else 0,
            driver_name=self.driver_name,
            attributes=pci_report.attributes(fpga_common.RESOURCE_CLASS,
                                             traits),
            attach_handles=[pci_report.pci_handle(f) for f in users])
        board: dict[str, Any] = {'management_function': mgmt.address}
        if users:
            board['user_functions'] = [f.address for f in users]
            board['user_product_id'] = users[0].device_id
        return pci_report.device('FPGA', mgmt, [deployable], **board)
