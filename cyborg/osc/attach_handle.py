"""``openstack accelerator attach handle list|clean|release``: attach
handles and their cleaning after use (API microversion 2.8)."""
import argparse
from collections.abc import Iterable
from typing import Any

from osc_lib.command import command

from cyborg.osc import plugin

COLUMNS = ('uuid', 'attach_type', 'attach_info', 'in_use', 'clean_state',
           'clean_reason', 'clean_since', 'device_uuid', 'hostname')
HEADINGS = ('UUID', 'Type', 'Info', 'In Use', 'Clean State', 'Clean Reason',
            'Clean Since', 'Device', 'Hostname')
CLEAN_STATES = ('cleaning', 'maintenance', 'none')


def _info(value: dict[str, str]) -> str:
    return ', '.join(f'{k}={v}' for k, v in sorted(value.items()))


def _row(handle: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(_info(handle[c]) if c == 'attach_info' else handle[c]
                 for c in COLUMNS)


class ListAttachHandle(command.Lister):
    """List attach handles, with whether each is being cleaned after use
    or held in maintenance after a failed clean, and why."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument('--device', metavar='<device-uuid>',
                            help='Only the handles of this device')
        parser.add_argument('--clean-state', choices=CLEAN_STATES,
                            help='Only the handles in this clean state '
                                 '(none: not being cleaned)')
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], Iterable[Any]]:
        found = plugin.client_of(self.app).attach_handles(
            device_uuid=parsed_args.device,
            clean_state=parsed_args.clean_state)
        return HEADINGS, [_row(h) for h in found]


class _HandleAction(command.ShowOne):
    action: str

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument('uuid', metavar='<uuid>',
                            help='The attach handle, held in maintenance')
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        handle = plugin.client_of(self.app).attach_handle_action(
            parsed_args.uuid, self.action)
        return HEADINGS, _row(handle)


class CleanAttachHandle(_HandleAction):
    """Clean again an attach handle held in maintenance after a failed
    clean; it is cleaning until its host's agent has cleaned it."""

    action = 'clean'


class ReleaseAttachHandle(_HandleAction):
    """Give an attach handle held in maintenance back without cleaning
    it: it is offered to instances again."""

    action = 'release'
