"""What the agent and nova-compute load: never the DB layer."""
import json
import subprocess
import sys
import textwrap

# Runs in a fresh interpreter, so that modules the test process loaded
# (the conftest loads the whole DB layer) do not hide an import.
_DISCOVERY = textwrap.dedent('''
    import json
    import sys
    import tempfile

    import cyborg.os_acc  # noqa: F401  (what nova-compute imports)
    from cyborg import conf as cyborg_conf
    from cyborg.accelerator import drivers
    from cyborg.accelerator import pci
    from cyborg.common import device_report
    from cyborg.tests.harness.sysfs import SysfsTree

    tree = SysfsTree(tempfile.mkdtemp())
    tree.add_function('0000:3b:00.0', 0x10de, 0x1eb8, 0x030200)
    tree.add_function('0000:5e:00.0', 0x1af4, 0x1041, 0x020000)
    conf = cyborg_conf.CONF
    conf([], project='cyborg', default_config_files=[])
    conf.set_override('host', 'cmp1')
    conf.set_override('sysfs_root', tree.root, 'agent')
    conf.set_override('enabled_drivers',
                      ['fake_driver', 'generic_pci', 'nvidia_gpu'], 'agent')
    conf.set_override('device_specs', ['{"vendor_id": "0x1af4"}'],
                      'generic_pci')
    with pci.discovery_pass():
        devices = [d.to_dict() for driver in drivers.load_drivers(conf)
                   for d in driver.discover()]
    report = {'hostname': 'cmp1', 'devices': devices}
    device_report.validate_report('cmp1', report)
    print(json.dumps({
        'devices': len(devices),
        'loaded': sorted(n for n in sys.modules
                         if n.split('.')[0] == 'sqlalchemy'
                         or n == 'cyborg.db' or n.startswith('cyborg.db.')),
    }))
''')

_AGENT = textwrap.dedent('''
    import json
    import sys

    import cyborg.cmd.agent  # noqa: F401  (first, as the agent does)
    import cyborg.agent.manager  # noqa: F401
    import cyborg.agent.endpoints  # noqa: F401
    import cyborg.agent.resource_tracker  # noqa: F401
    import cyborg.agent.service  # noqa: F401

    print(json.dumps(sorted(n for n in sys.modules
                            if n.split('.')[0] == 'sqlalchemy'
                            or n == 'cyborg.db'
                            or n.startswith('cyborg.db.'))))
''')


def _run(code: str) -> str:
    result = subprocess.run([sys.executable, '-c', code], check=False,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def test_discovery_and_os_acc_load_no_database_layer():
    outcome = json.loads(_run(_DISCOVERY))
    # The fake driver's one default card, the GPU and the generic
    # function: discovery did run.
    assert outcome['devices'] == 3
    assert outcome['loaded'] == []


def test_agent_modules_load_no_database_layer():
    assert json.loads(_run(_AGENT)) == []
