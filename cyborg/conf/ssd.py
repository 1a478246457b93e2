"""Options of the [ssd_devices] group: the inspur_nvme_ssd driver's device
lifecycle."""
from oslo_config import cfg

from cyborg.conf.lifecycle import lifecycle_opts

ssd_group = cfg.OptGroup(
    'ssd_devices',
    title='NVMe SSD driver options',
    help='How the inspur_nvme_ssd driver readies and cleans its devices.')

ssd_opts: list[cfg.Opt] = [
    cfg.StrOpt(
        'nvme_path',
        default='nvme',
        help='The nvme-cli tool that formats a drive to clean it after use '
             '(clean_after_use). A bare name is looked up on PATH; it runs '
             'behind [agent] root_helper when one is set.'),
    cfg.IntOpt(
        'format_timeout',
        default=600,
        min=1,
        help='Seconds a format may take before it is stopped and the clean '
             'fails. A user-data erase of a large drive takes minutes.'),
]
ssd_opts += lifecycle_opts(
    'Inspur NVMe SSDs of the inspur_nvme_ssd driver',
    'every namespace is formatted with "nvme format" of nvme-cli, which '
    'erases it')


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(ssd_group)
    conf.register_opts(ssd_opts, group=ssd_group)


def list_opts() -> dict[cfg.OptGroup, list[cfg.Opt]]:
    return {ssd_group: ssd_opts}
