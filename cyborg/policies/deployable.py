"""Policy rules of deployables."""
from oslo_policy import policy

from cyborg.policies.base import rule

P = 'cyborg:deployable:%s'

rules = [
    rule(P % 'get_all', 'rule:project_manager_or_admin',
         'List deployables.', [('GET', '/v2/deployables')]),
    rule(P % 'get_one', 'rule:project_manager_or_admin',
         'Show a deployable.', [('GET', '/v2/deployables/{uuid}')]),
    rule(P % 'program', 'rule:admin_api', 'Program an FPGA deployable.',
         [('PATCH', '/v2/deployables/{uuid}/program')]),
]


def list_rules() -> list[policy.RuleDefault]:
    return rules
