"""Policy rules of attach handles and their cleaning after use."""
from oslo_policy import policy

from cyborg.policies.base import rule

P = 'cyborg:attach_handle:%s'

rules: list[policy.RuleDefault] = [
    rule(P % 'get_all', 'rule:admin_api',
         'List attach handles with their clean state, reason and since '
         'when (microversion 2.8).', [('GET', '/v2/attach_handles')]),
    rule(P % 'clean', 'rule:admin_api',
         'Clean again an attach handle held in maintenance after a failed '
         'clean (microversion 2.8).',
         [('POST', '/v2/attach_handles/{uuid}/clean')]),
    rule(P % 'release', 'rule:admin_api',
         'Give an attach handle held in maintenance back without cleaning '
         'it (microversion 2.8).',
         [('POST', '/v2/attach_handles/{uuid}/release')]),
]


def list_rules() -> list[policy.RuleDefault]:
    return rules
