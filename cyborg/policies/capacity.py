"""Policy rules of the capacity view."""
from oslo_policy import policy

from cyborg.policies.base import rule

P = 'cyborg:capacity:%s'

rules: list[policy.RuleDefault] = [
    rule(P % 'get', 'rule:project_manager_or_admin',
         'Show the accelerator capacity per host, resource class or trait: '
         'total, used, reserved, unhealthy and available (microversion '
         '2.7).', [('GET', '/v2/capacity')]),
]


def list_rules() -> list[policy.RuleDefault]:
    return rules
