"""``openstack accelerator service list``."""
import argparse
from collections.abc import Iterable
from typing import Any

from osc_lib.command import command

from cyborg.osc import plugin

COLUMNS = ('id', 'host', 'binary', 'hostname', 'version', 'state',
           'last_seen_at')
HEADINGS = ('ID', 'Host', 'Binary', 'Hostname', 'Version', 'State',
            'Last Seen At')


class ListService(command.Lister):
    """List the accelerator conductors and agents, up or down."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument('--binary', metavar='<binary>',
                            help='Only services of this binary '
                                 '(cyborg-conductor or cyborg-agent)')
        parser.add_argument('--host', metavar='<host>',
                            help='Only the services of this host')
        parser.add_argument('--limit', metavar='<limit>', type=int,
                            help='At most this many services')
        parser.add_argument('--marker', metavar='<id>', type=int,
                            help='Services after the one with this ID')
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], Iterable[Any]]:
        found = plugin.client_of(self.app).services(
            binary=parsed_args.binary, host=parsed_args.host,
            limit=parsed_args.limit, marker=parsed_args.marker)
        return HEADINGS, [tuple(s[c] for c in COLUMNS) for s in found]
