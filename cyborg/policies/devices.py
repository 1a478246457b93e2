"""Policy rules of devices."""
from oslo_policy import policy

from cyborg.policies.base import rule

P = 'cyborg:device:%s'

rules: list[policy.RuleDefault] = [
    rule(P % 'get_all', 'rule:project_manager_or_admin', 'List devices.',
         [('GET', '/v2/devices')]),
    rule(P % 'get_one', 'rule:project_manager_or_admin', 'Show a device.',
         [('GET', '/v2/devices/{uuid}')]),
    rule(P % 'disable', 'rule:admin_api',
         'Take a device out of scheduling (maintenance).',
         [('POST', '/v2/devices/{uuid}/disable')]),
    rule(P % 'enable', 'rule:admin_api', 'Return a device to scheduling.',
         [('POST', '/v2/devices/{uuid}/enable')]),
    rule(P % 'set_health', 'rule:admin_api',
         "Set a device's health over its agent's readings, or clear that "
         'setting (microversion 2.6).',
         [('PUT', '/v2/devices/{uuid}/health'),
          ('DELETE', '/v2/devices/{uuid}/health')]),
    # Administrators only, unlike showing a device: the answer names the
    # instances and projects of every project that uses the device.
    rule(P % 'impact', 'rule:admin_api',
         'List the accelerator requests, instances and projects that '
         'taking a device out would touch (microversion 2.6).',
         [('GET', '/v2/devices/{uuid}/impact')]),
    # Administrators only: the options come from the host's agent.
    rule(P % 'get_layout', 'rule:admin_api',
         'Show a device\'s desired layout and what its agent offers '
         '(microversion 2.8).',
         [('GET', '/v2/devices/{uuid}/layout')]),
    rule(P % 'set_layout', 'rule:admin_api',
         'Set or clear a device\'s desired layout (SR-IOV VF count, mdev '
         'type and count, FPGA region image; microversion 2.8).',
         [('PUT', '/v2/devices/{uuid}/layout'),
          ('DELETE', '/v2/devices/{uuid}/layout')]),
]


def list_rules() -> list[policy.RuleDefault]:
    return rules
