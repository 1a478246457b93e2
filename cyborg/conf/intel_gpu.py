"""Options of the [intel_gpu_devices] group: the intel_gpu driver's device
lifecycle."""
from cyborg.conf import groups
from cyborg.conf.lifecycle import FUNCTION_RESET

GROUP = groups.driver_group(
    'intel_gpu_devices',
    title='Intel GPU driver options',
    help='How the intel_gpu driver readies and cleans the Intel Data '
         'Center GPU Flex and Max and Battlemage GPUs it reports: each GPU '
         'whole (resource class PGPU) or each of its SR-IOV virtual '
         'functions (resource class VGPU), whose number a vf_count layout '
         'sets on GPUs the xe driver drives (xe max_vfs module parameter).',
    family='Intel GPUs of the intel_gpu driver',
    clean_how=FUNCTION_RESET)

register_opts = GROUP.register_opts
list_opts = GROUP.list_opts
