"""``openstack accelerator driver list``."""
import argparse
from collections.abc import Iterable
from typing import Any

from osc_lib.command import command

COLUMNS = ('host', 'hostname', 'driver_name', 'devices', 'deployables',
           'accelerators')
HEADINGS = ('Host', 'Hostname', 'Driver Name', 'Devices', 'Deployables',
            'Accelerators')


class ListDriver(command.Lister):
    """List what the drivers of each agent host found.

    Only drivers that found devices are listed.
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument('--host', metavar='<host>',
                            help='Only the drivers of this agent host')
        parser.add_argument('--driver', metavar='<driver-name>',
                            help='Only this driver')
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], Iterable[Any]]:
        found = self.app.client_manager.accelerator_ops.drivers(
            host=parsed_args.host, driver_name=parsed_args.driver)
        return HEADINGS, [tuple(d[c] for c in COLUMNS) for d in found]
