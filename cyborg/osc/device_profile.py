"""``openstack accelerator device profile set|unset`` and ``openstack
accelerator device profile access show`` (microversion 2.10): who may
use a private device profile.

python-openstackclient's own ``accelerator device profile`` commands
create, list, show and delete profiles; these add what they lack.
"""
import argparse
from typing import Any

from osc_lib import exceptions
from osc_lib.cli import format_columns
from osc_lib.command import command

from cyborg.osc import plugin

ACCESS_SHOWN = ('uuid', 'name', 'is_public', 'projects')


def profile_argument(parser: argparse.ArgumentParser) -> None:
    """The positional profile argument of the commands."""
    parser.add_argument('profile', metavar='<profile>',
                        help='The device profile (its name or UUID)')


class SetDeviceProfile(command.Command):
    """Make a device profile private or public, and let projects use it
    while it is private. The projects are added first, so that a project
    given a profile being made private never loses it in between."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        profile_argument(parser)
        visibility = parser.add_mutually_exclusive_group()
        visibility.add_argument(
            '--private', dest='is_public', action='store_const',
            const=False, default=None,
            help='Only the projects of its access list (and '
                 'administrators) may see and use the profile')
        visibility.add_argument(
            '--public', dest='is_public', action='store_const', const=True,
            help='Every project may see and use the profile')
        parser.add_argument(
            '--project', metavar='<project-id>', action='append',
            default=[],
            help='Add a project (its Keystone ID) to the access list '
                 '(repeat option to add several)')
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> None:
        if parsed_args.is_public is None and not parsed_args.project:
            raise exceptions.CommandError(
                'Give --private, --public or at least one --project.')
        client = plugin.client_of(self.app)
        for project in parsed_args.project:
            client.add_device_profile_project(parsed_args.profile, project)
        if parsed_args.is_public is not None:
            client.set_device_profile_public(parsed_args.profile,
                                             parsed_args.is_public)


class UnsetDeviceProfile(command.Command):
    """Take projects out of a device profile's access list."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        profile_argument(parser)
        parser.add_argument(
            '--project', metavar='<project-id>', action='append',
            required=True,
            help='Remove a project (its Keystone ID) from the access list '
                 '(repeat option to remove several)')
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> None:
        client = plugin.client_of(self.app)
        for project in parsed_args.project:
            client.remove_device_profile_project(parsed_args.profile,
                                                 project)


class ShowDeviceProfileAccess(command.ShowOne):
    """Show who may use a device profile: whether it is public, and the
    projects of its access list (which count while it is private)."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        profile_argument(parser)
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        client = plugin.client_of(self.app)
        profile = client.device_profile(parsed_args.profile)
        projects = client.device_profile_projects(profile['uuid'])
        shown = dict(profile, projects=format_columns.ListColumn(projects))
        return ACCESS_SHOWN, tuple(shown[c] for c in ACCESS_SHOWN)
