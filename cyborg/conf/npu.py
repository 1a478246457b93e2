"""Options of the [npu_devices] group: the huawei_ascend driver's device
lifecycle."""
from cyborg.conf import groups
from cyborg.conf.lifecycle import FUNCTION_RESET

GROUP = groups.driver_group(
    'npu_devices',
    title='NPU driver options',
    help='How the huawei_ascend driver readies and cleans its devices.',
    family='Huawei Ascend NPUs of the huawei_ascend driver',
    clean_how=FUNCTION_RESET)

register_opts = GROUP.register_opts
list_opts = GROUP.list_opts
