"""The base check strings that resource policies are built from."""
from oslo_policy import policy

ADMIN = 'role:admin'
SERVICE = 'role:service'
PROJECT_MEMBER = 'role:member and project_id:%(project_id)s'
PROJECT_READER = 'role:reader and project_id:%(project_id)s'
PROJECT_MANAGER = 'role:manager and project_id:%(project_id)s'

rules: list[policy.RuleDefault] = [
    policy.RuleDefault('admin_api', ADMIN,
                       description='An administrator of the cloud.'),
    policy.RuleDefault('service_api', SERVICE,
                       description='Another OpenStack service, such as '
                                   'Nova, acting with a service role.'),
    policy.RuleDefault('project_member_api', PROJECT_MEMBER,
                       description='A member of the owning project.'),
    policy.RuleDefault('project_reader_api', PROJECT_READER,
                       description='A reader of the owning project.'),
    policy.RuleDefault('project_manager_api', PROJECT_MANAGER,
                       description='A manager of the owning project.'),
    policy.RuleDefault('project_reader_or_admin',
                       'rule:project_reader_api or rule:admin_api',
                       description='A project reader or an administrator.'),
    policy.RuleDefault('project_member_or_admin',
                       'rule:project_member_api or rule:admin_api',
                       description='A project member or an administrator.'),
    policy.RuleDefault('project_manager_or_admin',
                       'rule:project_manager_api or rule:admin_api',
                       description='A project manager or an administrator.'),
    policy.RuleDefault('project_member_or_service',
                       'rule:project_member_api or rule:service_api '
                       'or rule:admin_api',
                       description='A project member, a service or an '
                                   'administrator.'),
    policy.RuleDefault('project_reader_or_service',
                       'rule:project_reader_api or rule:service_api '
                       'or rule:admin_api',
                       description='A project reader, a service or an '
                                   'administrator.'),
]

PROJECT_SCOPE = ['project']


def rule(name: str, check_str: str, description: str,
         operations: list[tuple[str, str]]) -> policy.DocumentedRuleDefault:
    """A project-scoped rule for one API operation."""
    return policy.DocumentedRuleDefault(
        name=name, check_str=check_str, description=description,
        operations=[{'method': m, 'path': p} for m, p in operations],
        scope_types=PROJECT_SCOPE)


def list_rules() -> list[policy.RuleDefault]:
    return rules
