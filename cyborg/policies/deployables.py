"""Policy rules of deployables."""
from oslo_policy import policy

from cyborg.policies.base import rule

P = 'cyborg:deployable:%s'

rules: list[policy.RuleDefault] = [
    rule(P % 'get_all', 'rule:project_manager_or_admin',
         'List deployables (and the accelerators of the v1 API).',
         [('GET', '/v2/deployables'), ('GET', '/v1/accelerators')]),
    rule(P % 'get_one', 'rule:project_manager_or_admin',
         'Show a deployable (or a v1 accelerator).',
         [('GET', '/v2/deployables/{uuid}'),
          ('GET', '/v1/accelerators/{uuid}')]),
    rule(P % 'program', 'rule:admin_api', 'Program an FPGA deployable.',
         [('PATCH', '/v2/deployables/{uuid}/program'),
          ('PATCH', '/v2/deployables/{uuid}/program/{image_uuid}')]),
]


def list_rules() -> list[policy.RuleDefault]:
    return rules
