"""Options of the [upgrade_levels] group: RPC caps for rolling upgrades."""
from oslo_config import cfg

upgrade_group = cfg.OptGroup(
    'upgrade_levels',
    title='RPC version caps',
    help='During a rolling upgrade, cap the RPC version a service sends so '
         'that peers which are not upgraded yet still understand it.')

upgrade_opts: list[cfg.Opt] = [
    cfg.StrOpt(
        'conductor',
        help='Highest RPC API version sent to conductors, e.g. "1.0". '
             'Unset means the newest this release knows.'),
    cfg.StrOpt(
        'agent',
        help='Highest RPC API version sent to agents, e.g. "1.0". Unset '
             'means the newest this release knows.'),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(upgrade_group)
    conf.register_opts(upgrade_opts, group=upgrade_group)


def list_opts() -> dict[cfg.OptGroup, list[cfg.Opt]]:
    return {upgrade_group: upgrade_opts}
