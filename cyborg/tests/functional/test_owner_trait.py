"""Every resource provider cyborg writes carries ``OWNER_CYBORG``.

Nova's scheduler (2026.2) asks for ``OWNER_NOVA`` in every request group
of its own and leaves the providers that carry ``OWNER_CYBORG`` to device
profiles; a provider of ours without it could be handed to an instance as
if Nova owned it. Each driver family reports its devices from a fake
sysfs tree (the fake driver from its options); the report goes through
the conductor's inventory code into the database and out to a real
placement, where each provider's traits are read back.
"""
import pytest

from cyborg import context as cyborg_context
from cyborg.accelerator import pci
from cyborg.accelerator.drivers import fake
from cyborg.conductor import placement_sync
from cyborg.db.api import inventory
from cyborg.tests.functional import test_handle_safety as families
from cyborg.tests.harness import placement_server
from cyborg.tests.harness.sysfs import SysfsTree

OWNER = 'OWNER_CYBORG'


def _nova_mdevs(conf) -> None:
    families._nvidia_conf(conf)
    conf.set_override('mdev_creator', 'nova', 'gpu_devices')


# The families of test_handle_safety (the NVIDIA one has a whole T4 and
# an A100 serving vGPUs), the NVIDIA one again with mdevs Nova creates,
# and the fake driver.
FAMILIES = dict(families.FAMILIES, nvidia_gpu_nova_mdevs=(
    families.FAMILIES['nvidia_gpu'][0], families._nvidia, _nova_mdevs))


def _discover(conf, tmp_path, family):
    if family == 'fake':
        conf.set_override('vgpu_device_count', 1, 'fake_driver')
        return fake.FakeDriver(conf).discover()
    driver_class, build, configure = FAMILIES[family]
    tree = SysfsTree(tmp_path / 'host')
    build(tree)
    conf.set_override('sysfs_root', tree.root, 'agent')
    configure(conf)
    with pci.discovery_pass():
        return driver_class(conf).discover()


@pytest.mark.parametrize('family', [*FAMILIES, 'fake'])
def test_every_provider_carries_owner_cyborg(conf, tmp_path, sqlite_engine,
                                             placement_url, placement,
                                             family):
    conf.set_override('host', 'cmp1')
    devices = _discover(conf, tmp_path, family)
    deployables = [dep for d in devices for dep in d.deployables]
    assert deployables, f'{family} reported nothing'
    # What each driver says of its deployables...
    for deployable in deployables:
        traits = {v for k, v in deployable.attributes.items()
                  if k.startswith('trait')}
        assert OWNER in traits, deployable.name
    rcs = {dep.attributes['rc'] for dep in deployables}
    if family.startswith('nvidia_gpu'):
        assert rcs == {'PGPU', 'VGPU'}
    # ... and what placement holds once the conductor wrote it.
    node = placement.create_compute_node()
    inventory.apply_report(cyborg_context.get_admin_context(), 'cmp1', {
        'hostname': node['name'],
        'devices': [d.to_dict() for d in devices]})
    placement_server.point_at(conf, placement_url)
    sync = placement_sync.PlacementSync(conf)
    assert sync.sync_host(node['name']).pending == 0
    children = [u for u, p in placement.tree(node['uuid']).items()
                if u != node['uuid']]
    assert len(children) == len(deployables)
    for rp_uuid in children:
        assert OWNER in placement.traits(rp_uuid), rp_uuid
