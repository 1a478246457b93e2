"""Options of the [conductor] group: binding accelerator requests, and
expiring those never bound."""
from oslo_config import cfg

from cyborg.conf import groups

conductor_opts = [
    cfg.IntOpt(
        'bind_timeout',
        default=300,
        min=1,
        help='Seconds a bind that needs the agent (programming an FPGA, '
             'creating a vGPU) may take. A bind not finished by then '
             'fails. A failed bind stays BindStarted while its "failed" '
             'event is sent to Nova again, until Nova takes it (it drops '
             'the event of an instance not on a host yet) or the instance '
             'is gone, for at most this many seconds more; then it is '
             'BindFailed. Keep it below Nova\'s [DEFAULT] '
             'arq_binding_timeout (300 by default), or Nova gives up '
             'first.'),
    cfg.IntOpt(
        'bind_workers',
        default=16,
        min=1,
        help='Threads of a conductor that run binds needing the agent, and '
             'send events to Nova.'),
    cfg.IntOpt(
        'unbound_request_ttl',
        default=3600,
        min=0,
        help='Seconds an accelerator request may stay Initial (created, '
             'never bound to an instance) before a conductor deletes it; '
             '0 keeps such requests for ever. Nova creates an instance\'s '
             'requests and binds them in the same nova-conductor call, '
             'seconds apart, and deletes those of a bind that failed; a '
             'request still unbound after an hour was abandoned (a client '
             'that went away, a nova-conductor that stopped between the '
             'create and the bind), and would otherwise be kept, and '
             'counted against its project\'s accelerator_requests limit, '
             'for ever. An hour leaves an API user who creates requests to '
             'attach them to a running server (microversion 2.9) time to '
             'bind them by hand. One conductor at a time looks for such '
             'requests, every minute, so one is deleted at most a minute '
             'or so after this many seconds; each deletion sends '
             'accelerator.arq.delete with reason "expired". It is also '
             'how long a create\'s Idempotency-Key (microversion 2.11) '
             'answers with the requests it made; with 0, for as long as '
             'they exist.'),
    cfg.PortOpt(
        'metrics_port',
        default=0,
        help='TCP port on which the conductor serves Prometheus metrics at '
             '/metrics: accelerator requests by state, how long its binds '
             'took and how many of its transactions the database aborted '
             'for a deadlock. 0, the default, serves none. Every conductor '
             'serves the same accelerator request counts (of the whole '
             'cloud), and a histogram of its own binds and counts of its '
             'own deadlocks. See the "Monitoring '
             'accelerators" admin guide.'),
    cfg.HostAddressOpt(
        'metrics_host',
        default='0.0.0.0',
        help='Address on which the conductor serves Prometheus metrics when '
             '[conductor] metrics_port is set: 0.0.0.0 for every IPv4 '
             'address, "::" for every IPv6 (and, where the kernel allows, '
             'IPv4) address, 127.0.0.1 for a Prometheus on this host only. '
             'The metrics are served without authentication: restrict who '
             'can reach the port.'),
    cfg.PortOpt(
        'health_port',
        default=0,
        help='TCP port on which the conductor answers health probes at '
             '/health (ready: it reaches its database and the message bus, '
             'and its periodic tasks run) and /health/live (alive: its '
             'periodic tasks run), in the '
             'application/health+json format. 0, the default, serves them '
             'on [conductor] metrics_port when that is set and nowhere '
             'otherwise; the metrics port itself serves both too. See '
             '"Liveness and readiness" in the operating guide.'),
    cfg.HostAddressOpt(
        'health_host',
        default='0.0.0.0',
        help='Address on which the conductor answers health probes when '
             '[conductor] health_port is set: 0.0.0.0 for every IPv4 '
             'address (a Kubernetes probe comes to the pod\'s address), '
             '127.0.0.1 for a probe run on this host. The probes are '
             'answered without authentication; an outage\'s error names '
             'the peer that cannot be reached.'),
]

GROUP = groups.Group(
    'conductor',
    title='Conductor options',
    help='How cyborg-conductor binds accelerator requests, and how long '
         'it keeps those never bound.',
    opts=conductor_opts)

register_opts = GROUP.register_opts
list_opts = GROUP.list_opts
