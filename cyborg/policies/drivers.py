"""Policy rules of the driver list."""
from oslo_policy import policy

from cyborg.policies.base import rule

P = 'cyborg:driver:%s'

rules: list[policy.RuleDefault] = [
    rule(P % 'get_all', 'rule:project_manager_or_admin',
         'List the drivers of each agent host and what they found '
         '(microversion 2.5).', [('GET', '/v2/drivers')]),
]


def list_rules() -> list[policy.RuleDefault]:
    return rules
