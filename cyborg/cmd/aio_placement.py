"""The placement service cyborg-aio runs beside itself, when installed.

openstack-placement (``pip install 'cyborg[aio]'``) runs in a child
process (``aio_child``) on SQLite under the state directory, with
``noauth2``: the token ``admin`` is an administrator. It reads its
configuration through ``OS_PLACEMENT_CONFIG_DIR`` and creates its schema
when it starts.
"""
import importlib.util
import uuid
from typing import Any

from oslo_config import cfg

from cyborg.cmd import aio_child
from cyborg.conductor import placement_client

# The placement microversion of the calls cyborg-aio prints.
MICROVERSION = '1.39'


def installed() -> bool:
    """Whether openstack-placement can be imported."""
    return importlib.util.find_spec('placement') is not None


class EmbeddedPlacement(aio_child.ChildService):
    """Placement under ``<state_dir>/placement``."""

    name = 'placement'
    app = 'placement.wsgi.api:application'

    def prepare(self) -> dict[str, str]:
        (self.workdir / 'placement.conf').write_text(
            '[api]\nauth_strategy = noauth2\n'
            '[placement_database]\n'
            f'connection = sqlite:///{self.database}\n'
            'sync_on_startup = true\n')
        return {'OS_PLACEMENT_CONFIG_DIR': str(self.workdir)}

    @property
    def database(self) -> str:
        return str(self.workdir / 'placement.sqlite')


def ensure_compute_node(conf: cfg.ConfigOpts, name: str) -> str:
    """The uuid of the compute node provider ``name``, created as
    nova-compute would (with the trait COMPUTE_ACCELERATORS) if absent."""
    client = placement_client.PlacementClient(conf)
    node: dict[str, Any] | None = client.find_provider(name)
    if node is None:
        response = client.adapter.post(
            '/resource_providers', microversion=placement_client.MV_CREATE,
            json={'name': name, 'uuid': str(uuid.uuid4())}, raise_exc=True)
        node = response.json()
    traits = client.get_traits(node['uuid'])[1]
    if 'COMPUTE_ACCELERATORS' not in traits:
        client.set_traits(node['uuid'], traits | {'COMPUTE_ACCELERATORS'})
    return node['uuid']


def tree(url: str, root_uuid: str) -> list[dict[str, Any]]:
    """The providers below ``root_uuid``, as an operator would list them."""
    response = aio_child.session().get(
        f'{url}/resource_providers', params={'in_tree': root_uuid},
        headers={'X-Auth-Token': aio_child.TOKEN,
                 'OpenStack-API-Version': f'placement {MICROVERSION}'},
        timeout=10)
    response.raise_for_status()
    return [p for p in response.json()['resource_providers']
            if p['uuid'] != root_uuid]

