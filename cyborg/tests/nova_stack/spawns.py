"""What the recording virt driver saw: the file it writes and its reader.

Apart from ``virt`` so that the tests read it without importing Nova,
whose options would clash with cyborg's on the global ConfigOpts.
"""
import json
from typing import Any

# The environment variable naming the file a nova-compute's driver writes.
LOG_ENV = 'NOVA_STACK_ACCEL_LOG'
# The environment variable naming the sysfs root (a tree of
# cyborg.tests.harness.sysfs) in which a nova-compute's driver creates the
# mdevs of its MDEV handles, as Nova's libvirt driver creates them on the host.
SYSFS_ENV = 'NOVA_STACK_SYSFS_ROOT'
# nova-compute loads its driver from the nova.virt package only:
# ``COMPUTE`` runs nova-compute with the module ``virt`` registered there
# under this name first.
MODULE = 'recording'
DRIVER = f'{MODULE}.RecordingDriver'
COMPUTE = f'''
import sys
import nova.cmd.compute as compute
import cyborg.tests.nova_stack.virt as virt
sys.modules['nova.virt.{MODULE}'] = virt
sys.exit(compute.main())
'''


def read(path: str) -> list[dict[str, Any]]:
    """The calls a RecordingDriver wrote to ``path``, oldest first."""
    try:
        with open(path) as log:
            return [json.loads(line) for line in log if line.strip()]
    except FileNotFoundError:
        return []
