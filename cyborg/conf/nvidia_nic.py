"""Options of the [nvidia_nic_devices] group: what the nvidia_nic
driver's ports are connected to, and how it runs devlink."""
from oslo_config import cfg

from cyborg.conf import groups
from cyborg.conf.lifecycle import FUNCTION_RESET
from cyborg.conf.nic import nic_opts

nvidia_nic_opts = [
    cfg.StrOpt(
        'devlink_command',
        default='devlink',
        help='The devlink program of iproute2 the driver runs to set and '
             'read a port\'s eswitch mode (eswitch_mode layouts) and to '
             'read its devlink health reporters: a name looked up on the '
             'agent\'s PATH, or an absolute path. Eswitch commands need '
             'CAP_NET_ADMIN: they run through [agent] root_helper when the '
             'agent does not run as root; health reporters are read as '
             'the agent\'s user.'),
    cfg.FloatOpt(
        'devlink_health_interval',
        default=5.0,
        min=0,
        help='Seconds between two readings of the devlink health reporters '
             '(tx, rx, fw, fw_fatal, vnic of mlx5_core) of every port. One '
             'reading is one "devlink -j health show" for all ports; health '
             'passes in between ([agent] health_interval) use the last '
             'reading. A reporter in the error state makes its port '
             'degraded, unhealthy for fw_fatal (the firmware stopped '
             'responding); an error count that grew since the previous '
             'reading makes it degraded until the next. 0 reads no '
             'reporters.'),
]

GROUP = groups.driver_group(
    'nvidia_nic_devices',
    title='NVIDIA NIC driver options',
    help='How the nvidia_nic driver describes the NVIDIA (Mellanox) '
         'ConnectX and BlueField ports on the mlx5_core kernel driver it '
         'reports: which physical network each port is cabled to, which '
         'functions operators attach to ports, and how it runs devlink. '
         'The mappings are those of [nic_devices], listed here for the '
         'ports of this driver only.',
    family='NVIDIA NICs of the nvidia_nic driver',
    clean_how=FUNCTION_RESET,
    opts=[*nic_opts, *nvidia_nic_opts])

register_opts = GROUP.register_opts
list_opts = GROUP.list_opts
