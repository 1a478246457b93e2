"""What ``openstack accelerator device layout set`` sends for its
options, without a cloud: the parser of the real command."""
import pytest
from osc_lib import exceptions

from cyborg.osc import device_layout


def _layout(*argv):
    command = device_layout.SetDeviceLayout(None, None)
    args = command.get_parser('set').parse_args(['dev', *argv])
    return device_layout._layout(args)


@pytest.mark.parametrize('argv, layout', [
    (['--vf-count', '4'], {'vf_count': 4}),
    (['--vf-count', '16', '--vgpu-type', '1145', '--vgpu-count', '4'],
     {'vf_count': 16, 'vgpu_type': '1145', 'vgpu_count': 4}),
    (['--mig-mode', 'enabled', '--mig-partition', '3g.40gb, 3g.40gb'],
     {'mig_mode': 'enabled', 'mig_partition': ['3g.40gb', '3g.40gb']}),
    (['--mig-partition', ''], {'mig_partition': []}),
    (['--eswitch-mode', 'switchdev'], {'eswitch_mode': 'switchdev'}),
])
def test_options_become_the_layout(argv, layout):
    assert _layout(*argv) == layout


@pytest.mark.parametrize('argv, says', [
    ([], 'at least one'),
    (['--vgpu-type', '1145'], '--vgpu-type and --vgpu-count'),
    (['--mdev-count', '2'], '--mdev-type and --mdev-count'),
])
def test_incomplete_options_are_refused(argv, says):
    with pytest.raises(exceptions.CommandError, match=says):
        _layout(*argv)
