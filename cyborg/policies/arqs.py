"""Policy rules of accelerator requests (ARQs)."""
from oslo_policy import policy

from cyborg.policies.base import rule

P = 'cyborg:arq:%s'

rules: list[policy.RuleDefault] = [
    rule(P % 'get_all', 'rule:project_reader_or_service',
         'List the accelerator requests of the caller\'s project '
         '(administrators and services see every project).',
         [('GET', '/v2/accelerator_requests')]),
    rule(P % 'get_one', 'rule:project_reader_or_service',
         'Show an accelerator request.',
         [('GET', '/v2/accelerator_requests/{uuid}')]),
    rule(P % 'create', 'rule:project_member_or_service',
         'Create accelerator requests from a device profile.',
         [('POST', '/v2/accelerator_requests')]),
    rule(P % 'update', 'rule:project_member_or_service',
         'Bind or unbind accelerator requests.',
         [('PATCH', '/v2/accelerator_requests'),
          ('PATCH', '/v2/accelerator_requests/{uuid}')]),
    rule(P % 'delete', 'rule:project_member_or_service',
         'Delete accelerator requests.',
         [('DELETE', '/v2/accelerator_requests?arqs={uuids}'),
          ('DELETE', '/v2/accelerator_requests?instance={uuid}'),
          ('DELETE', '/v2/accelerator_requests/{uuid}')]),
    rule(P % 'all_projects', 'rule:admin_api or rule:service_api',
         'See and change the accelerator requests of every project.',
         [('GET', '/v2/accelerator_requests')]),
    rule(P % 'set_project', 'rule:admin_api',
         'Bind an accelerator request on behalf of another project '
         '(the /project_id patch operation, microversion 2.1).',
         [('PATCH', '/v2/accelerator_requests')]),
]


def list_rules() -> list[policy.RuleDefault]:
    return rules
