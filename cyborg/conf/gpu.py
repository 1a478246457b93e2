"""Options of the [gpu_devices] group: which NVIDIA GPUs serve vGPUs."""
from oslo_config import cfg

from cyborg.conf import groups

gpu_opts = [
    cfg.ListOpt(
        'enabled_vgpu_types',
        default=[],
        help='The mediated-device types to offer, by their directory name '
             'under mdev_supported_types, e.g. "nvidia-222". Each type must '
             'be given the GPUs that serve it in vgpu_type_addresses. '
             'The types a GPU offers are listed by '
             '"ls /sys/class/mdev_bus/<address>/mdev_supported_types" (on '
             'GPUs with SR-IOV, such as the A100, under the addresses of '
             'the virtual functions), with a readable name in each type\'s '
             '"name" file.'),
    cfg.MultiStrOpt(
        'vgpu_type_addresses',
        default=[],
        help='One "<type>:<address>[,<address>...]" per occurrence, e.g. '
             '"nvidia-222:0000:3b:00.0,0000:5e:00.0": the GPUs, by the '
             'PCI address of the whole GPU (never that of one of its '
             'virtual functions), that serve vGPUs of a type of '
             'enabled_vgpu_types. A GPU serves one type; all its vGPUs form '
             'one deployable. A GPU whose virtual functions offer the type '
             'serves it through them: each vGPU is created on one virtual '
             'function. A listed GPU that does not offer its type (its '
             'driver not loaded yet, SR-IOV not enabled yet) is not '
             'reported at all, with a warning, rather than reported as a '
             'whole GPU; an address with no NVIDIA GPU is warned about. '
             'The agent refuses to start when an entry is malformed, names '
             'a type missing from enabled_vgpu_types or gives an address '
             'two types, or when an enabled type has no entry.'),
]

GROUP = groups.driver_group(
    'gpu_devices',
    title='NVIDIA GPU driver options',
    help='The nvidia_gpu driver reports every NVIDIA GPU (VGA or 3D '
         'controller) of the host. A GPU is passed through whole '
         '(resource class PGPU) unless these options give it a vGPU type; '
         'then it is reported as that many vGPUs (resource class VGPU), '
         'created as mediated devices when an instance is bound to them '
         '(by the agent, or by nova-compute: see mdev_creator).',
    family='NVIDIA GPUs of the nvidia_gpu driver',
    clean_how="a vGPU's mediated device is removed and created again; a "
              'whole GPU gets a function-level reset through its sysfs '
              'reset file',
    opts=gpu_opts,
    mdevs='vGPUs of the nvidia_gpu driver')

register_opts = GROUP.register_opts
list_opts = GROUP.list_opts
