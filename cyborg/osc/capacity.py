"""``openstack accelerator capacity list``."""
import argparse
from collections.abc import Iterable
from typing import Any

from osc_lib.command import command

from cyborg.osc import plugin

# --group-by as the command line spells it: the API's group_by, the key
# of each row and its heading.
GROUPS = {'host': ('host', 'hostname', 'Hostname'),
          'resource-class': ('resource_class', 'resource_class',
                             'Resource Class'),
          'trait': ('trait', 'trait', 'Trait')}
COUNTS = ('total', 'used', 'reserved', 'unhealthy', 'available')
HEADINGS = ('Total', 'Used', 'Reserved', 'Unhealthy', 'Available')


class ListCapacity(command.Lister):
    """Show how many accelerators each host, resource class or trait has:
    total, used, reserved (held back from placement: maintenance, gone,
    or unhealthy), unhealthy, and available to new instances.
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument('--group-by', choices=tuple(GROUPS),
                            default='host',
                            help='One row per host (the default), resource '
                                 'class, or trait')
        parser.add_argument('--hostname', metavar='<hostname>',
                            help='Only the accelerators of this compute '
                                 'node')
        parser.add_argument('--resource-class', metavar='<resource-class>',
                            help='Only the accelerators of this resource '
                                 'class, e.g. FPGA')
        parser.add_argument('--type', metavar='<device-type>',
                            help='Only the accelerators of devices of this '
                                 'type, e.g. GPU')
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], Iterable[Any]]:
        group_by, key, heading = GROUPS[parsed_args.group_by]
        found = plugin.client_of(self.app).capacity(
            group_by=group_by, hostname=parsed_args.hostname,
            resource_class=parsed_args.resource_class,
            type=parsed_args.type)
        return ((heading, *HEADINGS),
                [(row[key], *(row[c] for c in COUNTS))
                 for row in found['capacity']])
