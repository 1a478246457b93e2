"""Policy rules of actions on an agent host."""
from oslo_policy import policy

from cyborg.policies.base import rule

P = 'cyborg:host:%s'

rules: list[policy.RuleDefault] = [
    rule(P % 'discover', 'rule:admin_api',
         'Make the agent of a host discover its devices and report now '
         '(microversion 2.5).', [('POST', '/v2/hosts/{host}/discover')]),
]


def list_rules() -> list[policy.RuleDefault]:
    return rules
