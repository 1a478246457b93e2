"""Policy rules of the service list (conductors and agents)."""
from oslo_policy import policy

from cyborg.policies.base import rule

P = 'cyborg:service:%s'

rules: list[policy.RuleDefault] = [
    rule(P % 'get_all', 'rule:project_manager_or_admin',
         'List the conductors and agents and whether they are up '
         '(microversion 2.5).', [('GET', '/v2/services')]),
]


def list_rules() -> list[policy.RuleDefault]:
    return rules
