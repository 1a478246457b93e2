"""Options of the [DEFAULT] group shared by every cyborg service."""
import os
import socket

from oslo_config import cfg

service_opts = [
    cfg.StrOpt(
        'host',
        default=socket.gethostname(),
        sample_default='<server-hostname>',
        help='Name of this node as the services know it: the agent listens '
             'for RPC on this name and the conductor addresses device-side '
             'work to it. It must be unique among the agents of a cloud. It '
             'need not be the hypervisor node name Nova uses for placement; '
             'set [agent] hostname for that.'),
    cfg.StrOpt(
        'state_path',
        default=os.path.join(os.path.expanduser('~'), '.cyborg'),
        sample_default='$HOME/.cyborg',
        help='Top-level directory for the state a service keeps on this '
             'host: the embedded SQLite database by default and the '
             'agent\'s local cache.'),
    cfg.IntOpt(
        'heartbeat_interval',
        default=10,
        min=1,
        help='Seconds between two heartbeats of a conductor or an agent. '
             'A service that has not sent one for [DEFAULT] '
             'service_down_time seconds is considered down.'),
    cfg.IntOpt(
        'service_down_time',
        default=60,
        min=1,
        help='Seconds after the last heartbeat at which a service is '
             'reported as down. Keep it several times larger than '
             'heartbeat_interval.'),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_opts(service_opts)


def list_opts() -> dict[str, list[cfg.Opt]]:
    return {'DEFAULT': service_opts}
