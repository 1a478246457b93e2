"""Options of the [fake_driver] group: the in-tree driver for demos."""
from oslo_config import cfg

from cyborg.conf import groups

fake_driver_opts = [
    cfg.IntOpt(
        'device_count',
        default=1,
        min=0,
        max=4096,
        help='How many fake devices the driver reports.'),
    cfg.IntOpt(
        'accelerators_per_device',
        default=16,
        min=1,
        max=248,
        help='How many accelerators (and TEST_PCI attach handles) each fake '
             'device offers.'),
    cfg.IntOpt(
        'vgpu_device_count',
        default=0,
        min=0,
        max=4096,
        help='How many fake GPUs offering vGPUs the driver reports, besides '
             'the FPGA-like devices. Each has one deployable of resource '
             'class VGPU whose accelerators are MDEV attach handles.'),
    cfg.IntOpt(
        'vgpus_per_device',
        default=4,
        min=1,
        max=64,
        help='How many vGPUs (MDEV attach handles) each fake GPU offers.'),
    cfg.StrOpt(
        'vgpu_handles',
        default='mdev',
        choices=[('mdev', 'MDEV attach handles, an mdev created at bind'),
                 ('sriov', 'PCI attach handles of SR-IOV VFs given a vGPU '
                           'type at bind, as NVIDIA vGPU 17 and later '
                           'have them')],
        help='What the fake GPUs\' vGPUs are. Either way the driver keeps '
             'what a bind made in memory until it is released.'),
    cfg.StrOpt(
        'program_log',
        help='A file to which the driver appends one JSON line for every '
             'device it is asked to program, so that a test in another '
             'process can see what was programmed. Unset, nothing is '
             'written.'),
    cfg.FloatOpt(
        'action_seconds',
        default=0.0,
        min=0.0,
        max=600.0,
        help='How long programming a fake device and creating a fake vGPU '
             'take, as on real devices they take seconds to minutes; tests '
             'use it to land requests while such work runs.'),
    cfg.BoolOpt(
        'program_fail',
        default=False,
        help='Make every attempt to program a fake device fail, to test '
             'how failed FPGA binds are handled.'),
    cfg.ListOpt(
        'faults',
        default=[],
        mutable=True,
        help='Health faults the fake devices report, as '
             '<slot>=<state>[:<reason>] entries, e.g. '
             '"0000:0c:00.0=unhealthy:ECC storm". The slot is the address '
             'of a fake FPGA (0000:0c:00.0 upwards) or GPU (1000:0c:00.0 '
             'upwards); the state healthy, degraded, unhealthy or '
             'unknown. Devices without a fault are healthy. The agent '
             'refuses to start on an invalid entry. The option is '
             'mutable: a configuration reload changes the faults of a '
             'running agent, and an invalid value then makes every fake '
             'device report "unknown".'),
    cfg.StrOpt(
        'fault_file',
        mutable=True,
        help='A JSON file of further health faults, '
             '{"<slot>": {"state": "<state>", "reason": "<reason>"}}, read '
             'again at every health pass, so that a test in another '
             'process can inject faults into a running agent and clear '
             'them (write {} or remove the file). A file that cannot be '
             'read or parsed makes every fake device report "unknown" '
             'with the problem as its reason; an invalid entry does so '
             'for its device only.'),
    cfg.StrOpt(
        'clean_log',
        mutable=True,
        help='A file to which the driver appends one JSON line for every '
             'attach handle it cleans, device it prepares and layout it '
             'applies, so that a test in another process can see them. '
             'Unset, nothing is written.'),
    cfg.BoolOpt(
        'clean_fail',
        default=False,
        mutable=True,
        help='Make every clean of a fake attach handle fail, to test how '
             'handles are held in maintenance.'),
    cfg.BoolOpt(
        'prepare_fail',
        default=False,
        mutable=True,
        help='Make every preparation of a fake device fail, to test how '
             'devices go to the error status.'),
    cfg.BoolOpt(
        'layout_fail',
        default=False,
        mutable=True,
        help='Make every layout change of a fake device fail after it was '
             'checked, to test how failed layouts are reported.'),
]

GROUP = groups.driver_group(
    'fake_driver',
    title='Fake driver options',
    help='The fake driver reports FPGA-like devices, and optionally GPUs '
         'offering vGPUs, that do not exist. It serves the all-in-one '
         'service, tests and benchmarks.',
    family='fake devices',
    clean_how='recorded in clean_log, and failing while clean_fail is set',
    opts=fake_driver_opts)

register_opts = GROUP.register_opts
list_opts = GROUP.list_opts
