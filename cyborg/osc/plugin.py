"""The OpenStackClient plugin: how ``openstack`` builds our client.

OpenStackClient loads this module from the ``openstack.cli.extension``
entry point and the commands from ``openstack.accelerator_ops.v2``. The
API name differs from the in-tree ``accelerator`` plugin's, so both load
side by side; the commands' names do not collide with the in-tree ones.
"""
import argparse
from typing import Any

from cyborg.osc import client

API_NAME = 'accelerator_ops'
API_VERSION_OPTION = 'os_accelerator_ops_api_version'
API_VERSIONS = ('2',)
DEFAULT_API_VERSION = '2'


def make_client(instance: Any) -> client.Client:
    """The client, on the SDK's accelerator proxy of the command's cloud
    (its session, endpoint and version discovery)."""
    return client.Client(instance.sdk_connection.accelerator)


def client_of(app: Any) -> client.Client:
    """The client ``make_client`` made, for a command of ``app``.

    OpenStackClient sets it on its client manager under ``API_NAME``.
    """
    made: client.Client = getattr(app.client_manager, API_NAME)
    return made


def build_option_parser(parser: argparse.ArgumentParser
                        ) -> argparse.ArgumentParser:
    """No global options: each command sends the microversion it needs
    (2.5, or the later one of its resource; see ``client``)."""
    return parser


def check_api_version(check_version: str) -> bool:
    """The microversion is negotiated per call, so any value is fine."""
    return True
