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
]


def list_rules() -> list[policy.RuleDefault]:
    return rules
