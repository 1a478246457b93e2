"""Options of the [qat_devices] group: the intel_qat driver's device
lifecycle."""
from oslo_config import cfg

from cyborg.conf.lifecycle import lifecycle_opts

qat_group = cfg.OptGroup(
    'qat_devices',
    title='QAT driver options',
    help='How the intel_qat driver readies and cleans its devices.')

qat_opts: list[cfg.Opt] = lifecycle_opts(
    'Intel QAT endpoints of the intel_qat driver',
    "a function-level reset through the function's sysfs reset file")


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(qat_group)
    conf.register_opts(qat_opts, group=qat_group)


def list_opts() -> dict[cfg.OptGroup, list[cfg.Opt]]:
    return {qat_group: qat_opts}
