"""``openstack accelerator driver list``."""
import argparse
from collections.abc import Iterable
from typing import Any

from osc_lib.command import command

from cyborg.osc import plugin

COLUMNS = ('host', 'hostname', 'driver_name', 'devices', 'deployables',
           'accelerators', 'state', 'since', 'error', 'agent_state')
HEADINGS = ('Host', 'Hostname', 'Driver Name', 'Devices', 'Deployables',
            'Accelerators', 'State', 'Since', 'Error', 'Agent State')
STATES = ('ok', 'no devices', 'failed', 'disabled')


class ListDriver(command.Lister):
    """List the drivers of each agent host: what they found, and their
    state (ok, no devices, failed since when, with the error, or disabled
    on the host by an operator).
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument('--host', metavar='<host>',
                            help='Only the drivers of this agent host')
        parser.add_argument('--driver', metavar='<driver-name>',
                            help='Only this driver')
        parser.add_argument('--state', choices=STATES,
                            help='Only the drivers in this state')
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], Iterable[Any]]:
        found = plugin.client_of(self.app).drivers(
            host=parsed_args.host, driver_name=parsed_args.driver,
            state=parsed_args.state)
        return HEADINGS, [tuple(d[c] for c in COLUMNS) for d in found]
