"""Options of the [amd_gpu_devices] group: the amd_gpu driver's device
lifecycle."""
from cyborg.conf import groups
from cyborg.conf.lifecycle import FUNCTION_RESET

GROUP = groups.driver_group(
    'amd_gpu_devices',
    title='AMD GPU driver options',
    help='How the amd_gpu driver readies and cleans the AMD Instinct GPUs '
         'it reports: each GPU whole (resource class PGPU) or, when AMD\'s '
         'GIM driver enabled SR-IOV virtual functions on it (gim vf_num '
         'module parameter), each virtual function (resource class VGPU).',
    family='AMD Instinct GPUs of the amd_gpu driver',
    clean_how=FUNCTION_RESET)

register_opts = GROUP.register_opts
list_opts = GROUP.list_opts
