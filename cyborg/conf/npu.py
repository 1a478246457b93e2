"""Options of the [npu_devices] group: the huawei_ascend driver's device
lifecycle."""
from oslo_config import cfg

from cyborg.conf.lifecycle import lifecycle_opts

npu_group = cfg.OptGroup(
    'npu_devices',
    title='NPU driver options',
    help='How the huawei_ascend driver readies and cleans its devices.')

npu_opts: list[cfg.Opt] = lifecycle_opts(
    'Huawei Ascend NPUs of the huawei_ascend driver',
    "a function-level reset through the function's sysfs reset file")


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(npu_group)
    conf.register_opts(npu_opts, group=npu_group)


def list_opts() -> dict[cfg.OptGroup, list[cfg.Opt]]:
    return {npu_group: npu_opts}
