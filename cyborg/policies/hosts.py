"""Policy rules of actions on an agent host."""
from oslo_policy import policy

from cyborg.policies.base import rule

P = 'cyborg:host:%s'

rules: list[policy.RuleDefault] = [
    rule(P % 'discover', 'rule:admin_api',
         'Make the agent of a host discover its devices and report now '
         '(microversion 2.5).', [('POST', '/v2/hosts/{host}/discover')]),
    rule(P % 'driver_list', 'rule:admin_api',
         'List the drivers installed on a host, with their versions and '
         'states, from its agent (microversion 2.8).',
         [('GET', '/v2/hosts/{host}/drivers')]),
    rule(P % 'driver_enable', 'rule:admin_api',
         'Enable a driver on a host at runtime (microversion 2.8).',
         [('POST', '/v2/hosts/{host}/drivers/{name}/enable')]),
    rule(P % 'driver_disable', 'rule:admin_api',
         'Disable a driver on a host at runtime; its devices leave '
         '(microversion 2.8).',
         [('POST', '/v2/hosts/{host}/drivers/{name}/disable')]),
    rule(P % 'driver_reload', 'rule:admin_api',
         'Reload the drivers of a host from their installed packages '
         '(microversion 2.8).', [('POST', '/v2/hosts/{host}/drivers/reload')]),
]


def list_rules() -> list[policy.RuleDefault]:
    return rules
