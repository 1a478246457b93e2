"""``openstack accelerator host discover``."""
import argparse
from typing import Any

from osc_lib.command import command

from cyborg.osc import plugin

COLUMNS = ('host', 'devices_added', 'devices_updated', 'devices_removed',
           'kept_in_use', 'placement_pending')


class DiscoverHost(command.ShowOne):
    """Make the agent of a host discover its devices and report now.

    Shows what the report changed.
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument('host', metavar='<host>',
                            help='The agent host (its [DEFAULT] host)')
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        result = plugin.client_of(self.app).discover(
            parsed_args.host)
        return COLUMNS, tuple(result[c] for c in COLUMNS)
