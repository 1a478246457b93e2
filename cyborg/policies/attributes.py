"""Policy rules of deployable attributes."""
from oslo_policy import policy

from cyborg.policies.base import rule

P = 'cyborg:attribute:%s'

rules: list[policy.RuleDefault] = [
    rule(P % 'get_all', 'rule:project_manager_or_admin',
         'List attributes.', [('GET', '/v2/attributes')]),
    rule(P % 'get_one', 'rule:project_manager_or_admin',
         'Show an attribute.', [('GET', '/v2/attributes/{uuid}')]),
    rule(P % 'create', 'rule:admin_api', 'Create an attribute.',
         [('POST', '/v2/attributes')]),
    rule(P % 'delete', 'rule:admin_api', 'Delete an attribute.',
         [('DELETE', '/v2/attributes/{uuid}')]),
]


def list_rules() -> list[policy.RuleDefault]:
    return rules
