"""Options of the [upgrade_levels] group: RPC caps for rolling upgrades."""
from oslo_config import cfg

from cyborg.conf import groups

upgrade_opts = [
    cfg.StrOpt(
        'conductor',
        help='Highest RPC API version sent to conductors, e.g. "1.0". '
             'Unset means the newest this release knows.'),
    cfg.StrOpt(
        'agent',
        help='Highest RPC API version sent to agents, e.g. "1.0". Unset '
             'means the newest this release knows.'),
]

GROUP = groups.Group(
    'upgrade_levels',
    title='RPC version caps',
    help='During a rolling upgrade, cap the RPC version a service sends so '
         'that peers which are not upgraded yet still understand it.',
    opts=upgrade_opts)

register_opts = GROUP.register_opts
list_opts = GROUP.list_opts
