"""Policy rules of device profiles."""
from oslo_policy import policy

from cyborg.policies.base import rule

P = 'cyborg:device_profile:%s'

rules: list[policy.RuleDefault] = [
    rule(P % 'get_all', 'rule:project_reader_or_service',
         'List device profiles.', [('GET', '/v2/device_profiles')]),
    rule(P % 'get_one', 'rule:project_reader_or_service',
         'Show a device profile.',
         [('GET', '/v2/device_profiles/{uuid_or_name}')]),
    rule(P % 'create', 'rule:admin_api', 'Create a device profile.',
         [('POST', '/v2/device_profiles')]),
    rule(P % 'delete', 'rule:admin_api', 'Delete device profiles.',
         [('DELETE', '/v2/device_profiles/{uuid_or_name}'),
          ('DELETE', '/v2/device_profiles?value={names}')]),
]


def list_rules() -> list[policy.RuleDefault]:
    return rules
