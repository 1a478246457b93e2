"""Options of the [ssd_devices] group: the inspur_nvme_ssd driver's device
lifecycle."""
from oslo_config import cfg

from cyborg.conf import groups

ssd_opts = [
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

GROUP = groups.driver_group(
    'ssd_devices',
    title='NVMe SSD driver options',
    help='How the inspur_nvme_ssd driver readies and cleans its devices.',
    family='Inspur NVMe SSDs of the inspur_nvme_ssd driver',
    clean_how='every namespace is formatted with "nvme format" of '
              'nvme-cli, which erases it',
    opts=ssd_opts)

register_opts = GROUP.register_opts
list_opts = GROUP.list_opts
