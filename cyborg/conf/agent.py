"""Options of the [agent] group: driver selection and the reporting loop."""
from oslo_config import cfg

from cyborg.conf import groups

agent_opts = [
    cfg.ListOpt(
        'enabled_drivers',
        default=['fake_driver'],
        help='Accelerator drivers to load, by their name in the '
             '"cyborg.accelerator.driver" entry-point namespace. The agent '
             'refuses to start when a name is unknown.'),
    cfg.StrOpt(
        'hostname',
        help='Name of this host\'s compute node resource provider in '
             'placement, which is the hypervisor node name Nova sends when '
             'it binds an accelerator request. Defaults to [DEFAULT] host.'),
    cfg.StrOpt(
        'root_helper',
        default='',
        help='Command put in front of the external tools drivers run to act '
             'on devices (FPGA programming tools such as fpgaconf and '
             'xbmgmt, ...) when the agent does not run as root, e.g. "sudo" '
             'or "sudo cyborg-rootwrap /etc/cyborg/rootwrap.conf". It is '
             'split into words like a shell would, but no shell runs. Empty '
             'runs the tools as the agent\'s own user.'),
    cfg.IntOpt(
        'periodic_interval',
        default=60,
        min=1,
        help='Seconds between two discovery passes. A report is sent to the '
             'conductor only when what the drivers found has changed since '
             'the last report the conductor accepted.'),
    cfg.IntOpt(
        'full_report_interval',
        default=600,
        min=0,
        help='Seconds after which the agent sends its whole inventory again '
             'even if nothing changed, so that a conductor repairs any drift '
             'in the database. 0 disables these full reports.'),
    cfg.StrOpt(
        'sysfs_root',
        default='/',
        help='Directory under which drivers look for sysfs ("sys/bus/pci", '
             '"sys/class", ...). On a host this is "/", and PCI devices are '
             'enumerated through udev; another directory holds a copy or a '
             'fake tree of sysfs, for tests and for agents in containers '
             'that mount the host\'s sysfs elsewhere.'),
    cfg.BoolOpt(
        'hotplug',
        default=True,
        help='Watch for PCI devices that are added, removed, bound to or '
             'unbound from a driver, or changed, and run a discovery pass '
             '(and a report, if the inventory changed) as soon as they '
             'happen instead of waiting for the next periodic pass. The '
             'agent listens to udevd where udevd runs (its control socket '
             '/run/udev/control exists), and to the kernel\'s uevents '
             'otherwise, as in a container without udevd. Where neither '
             'can be received (no netlink socket, missing permission) the '
             'agent logs a warning and relies on the periodic pass.'),
    cfg.FloatOpt(
        'hotplug_debounce',
        default=2.0,
        min=0,
        help='Seconds the agent waits after the first hot-plug event of a '
             'burst before it runs the discovery pass, so that a burst '
             '(creating 16 virtual functions gives dozens of events) causes '
             'one report and, with kernel uevents, the devices have time to '
             'get ready. Events during the wait are folded into that pass.'),
    cfg.StrOpt(
        'new_device_state',
        default='enabled',
        choices=[
            ('enabled', 'Devices the conductor has not seen before can be '
                        'scheduled as soon as they are reported.'),
            ('disabled', 'Devices the conductor has not seen before are '
                         'stored with status "maintaining": their '
                         'inventory in placement is reserved until an '
                         'operator enables them.'),
        ],
        help='Whether devices this host reports for the first time can be '
             'used at once. Devices the conductor already knows keep their '
             'status whatever this option says; a device that disappears '
             'from the host and comes back is new again.'),
    cfg.FloatOpt(
        'health_interval',
        default=1.0,
        min=0,
        help='Seconds between two health passes, in which the agent asks '
             'each driver for the health of each device it discovered last. '
             'A change of health goes to the conductor in that pass, and '
             'the conductor reserves an unhealthy device in placement before '
             'it answers, so placement stops offering a failed device within '
             'this interval plus a few tens of milliseconds. A pass reads a '
             'few sysfs files per device: about 23 ms for a host of 256 PCI '
             'functions, well under 1 ms for a host of 8 devices; an '
             'unchanged pass sends nothing. 0 turns health passes off: '
             'devices keep the health they had, and are "unknown" when they '
             'never had one.'),
    cfg.FloatOpt(
        'usage_interval',
        default=10.0,
        min=1.0,
        help='Seconds between two usage samples of every device '
             '(temperature, power, utilisation, memory, counters), read in '
             'the health pass that falls due. Samples are never stored: they '
             'update the agent\'s Prometheus metrics and go out as one '
             'accelerator.device.usage notification per sample when '
             'notifications are enabled, so this bounds the message rate '
             'each host adds to the bus.'),
    cfg.PortOpt(
        'metrics_port',
        default=0,
        help='TCP port on which the agent serves Prometheus metrics of its '
             'devices (health, temperature, power, utilisation, memory, '
             'driver counters) at /metrics. 0, the default, serves none. '
             'The values are those of the agent\'s last health pass. See '
             'the "Monitoring accelerators" admin guide.'),
    cfg.HostAddressOpt(
        'metrics_host',
        default='0.0.0.0',
        help='Address on which the agent serves Prometheus metrics when '
             '[agent] metrics_port is set: 0.0.0.0 for every IPv4 address, '
             '"::" for every IPv6 (and, where the kernel allows, IPv4) '
             'address, 127.0.0.1 for a Prometheus on this host only. The '
             'metrics are served without authentication: restrict who can '
             'reach the port.'),
    cfg.PortOpt(
        'health_port',
        default=0,
        help='TCP port on which the agent answers health probes at /health '
             '(ready: it reaches the message bus and its periodic tasks '
             'run) and /health/live (alive: its periodic tasks run), in the '
             'application/health+json format. 0, the default, serves them '
             'on [agent] metrics_port when that is set and nowhere '
             'otherwise; the metrics port itself serves both too. See '
             '"Liveness and readiness" in the operating guide.'),
    cfg.HostAddressOpt(
        'health_host',
        default='0.0.0.0',
        help='Address on which the agent answers health probes when '
             '[agent] health_port is set: 0.0.0.0 for every IPv4 '
             'address (a Kubernetes probe comes to the pod\'s address), '
             '127.0.0.1 for a probe run on this host. The probes are '
             'answered without authentication; an outage\'s error names '
             'the peer that cannot be reached.'),
    cfg.FloatOpt(
        'health_temperature_degraded',
        default=85.0,
        min=0,
        max=200,
        help='Degrees Celsius at or above which a PCI device\'s hottest '
             'hwmon sensor (or, for NVIDIA GPUs, NVML\'s GPU temperature) '
             'makes its health "degraded". Data-centre accelerators '
             'start throttling at around 85-90 C (a DFL FPGA card at its '
             'temp1_max, a GPU at its slowdown temperature): a device '
             'this hot does less work than placement thinks. Must not be '
             'above [agent] health_temperature_unhealthy.'),
    cfg.FloatOpt(
        'health_temperature_unhealthy',
        default=95.0,
        min=0,
        max=200,
        help='Degrees Celsius at or above which a PCI device\'s hottest '
             'sensor makes its health "unhealthy", so that it stops being '
             'offered: a few degrees higher boards shut themselves down '
             '(a DFL FPGA card at its temp1_emergency, a GPU at its '
             'shutdown temperature) and what runs on them is lost.'),
    cfg.StrOpt(
        'debugfs_path',
        default='/sys/kernel/debug',
        help='Where debugfs is mounted, under [agent] sysfs_root. Drivers '
             'read device telemetry the kernel only exposes there (Intel '
             'QAT 4xxx: qat_<device>_<address>/telemetry/device_data) '
             'and never write to it; telemetry an operator has not turned '
             'on (by writing to its "control" file) is not read. debugfs '
             'is readable by root only: an agent running as another user '
             'reads no telemetry.'),
]

GROUP = groups.Group(
    'agent',
    title='Agent options',
    help='How cyborg-agent discovers devices on its host and reports them '
         'to the conductor.',
    opts=agent_opts)

register_opts = GROUP.register_opts
list_opts = GROUP.list_opts
