"""Options of the [qat_devices] group: the intel_qat driver's device
lifecycle."""
from cyborg.conf import groups
from cyborg.conf.lifecycle import FUNCTION_RESET

GROUP = groups.driver_group(
    'qat_devices',
    title='QAT driver options',
    help='How the intel_qat driver readies and cleans its devices.',
    family='Intel QAT endpoints of the intel_qat driver',
    clean_how=FUNCTION_RESET)

register_opts = GROUP.register_opts
list_opts = GROUP.list_opts
