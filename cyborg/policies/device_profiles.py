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
    rule(P % 'all_projects', 'rule:admin_api',
         'See and use every private device profile (microversion 2.10); '
         'other callers see and use the public profiles and the private '
         'ones whose access list holds their project, and get for any '
         'other what they get for a profile that does not exist.',
         [('GET', '/v2/device_profiles'),
          ('GET', '/v2/device_profiles/{uuid_or_name}'),
          ('POST', '/v2/accelerator_requests')]),
    rule(P % 'update', 'rule:admin_api',
         'Make a device profile public or private (microversion 2.10).',
         [('PATCH', '/v2/device_profiles/{uuid_or_name}')]),
    rule(P % 'project_list', 'rule:admin_api',
         'List the projects that may use a private device profile '
         '(microversion 2.10).',
         [('GET', '/v2/device_profiles/{uuid_or_name}/projects')]),
    rule(P % 'project_add', 'rule:admin_api',
         'Let a project use a private device profile (microversion 2.10).',
         [('PUT', '/v2/device_profiles/{uuid_or_name}/projects/'
                  '{project_id}')]),
    rule(P % 'project_remove', 'rule:admin_api',
         'Take a project out of the access list of a device profile '
         '(microversion 2.10).',
         [('DELETE', '/v2/device_profiles/{uuid_or_name}/projects/'
                     '{project_id}')]),
]


def list_rules() -> list[policy.RuleDefault]:
    return rules
