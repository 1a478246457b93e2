"""``openstack accelerator host driver list|enable|disable|reload``."""
import argparse
from collections.abc import Iterable
from typing import Any

from osc_lib.command import command

from cyborg.osc import plugin

COLUMNS = ('name', 'driver_name', 'version', 'enabled', 'state', 'error')
HEADINGS = ('Name', 'Driver Name', 'Version', 'Enabled', 'State', 'Error')
CHANGE_COLUMNS = ('host', *COLUMNS, 'changed', 'reported')


def _host_parser(parser: argparse.ArgumentParser
                 ) -> argparse.ArgumentParser:
    parser.add_argument('host', metavar='<host>',
                        help='The agent host (its [DEFAULT] host)')
    return parser


def _rows(found: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [tuple(d[c] for c in COLUMNS) for d in found]


class ListHostDriver(command.Lister):
    """List the drivers installed on a host, from its agent: package
    version, whether enabled there, and state (ok, no devices, failed with
    the error, disabled).
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        return _host_parser(super().get_parser(prog_name))

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], Iterable[Any]]:
        found = plugin.client_of(self.app).host_drivers(parsed_args.host)
        return HEADINGS, _rows(found)


class _SetHostDriver(command.ShowOne):
    enabled: bool

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = _host_parser(super().get_parser(prog_name))
        parser.add_argument('name', metavar='<name>',
                            help='The driver\'s entry-point name, as '
                                 '"host driver list" shows it')
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        result = plugin.client_of(self.app).host_driver_set_enabled(
            parsed_args.host, parsed_args.name, self.enabled)
        return CHANGE_COLUMNS, tuple(result[c] for c in CHANGE_COLUMNS)


class EnableHostDriver(_SetHostDriver):
    """Enable a driver on a host now; the agent keeps it enabled across
    restarts, whatever [agent] enabled_drivers says, and reports its
    devices.
    """

    enabled = True


class DisableHostDriver(_SetHostDriver):
    """Disable a driver on a host now; its devices leave placement.

    Refused while accelerator requests hold its devices (named in the
    error). The agent keeps it disabled across restarts.
    """

    enabled = False


class ReloadHostDriver(command.Lister):
    """Reload the drivers of a host from their installed packages, after
    an upgrade, without restarting its agent; lists them after.
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        return _host_parser(super().get_parser(prog_name))

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], Iterable[Any]]:
        found = plugin.client_of(self.app).host_drivers_reload(
            parsed_args.host)
        return HEADINGS, _rows(found)
