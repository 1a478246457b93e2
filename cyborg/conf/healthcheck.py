"""The [healthcheck] group: oslo.middleware's options, cyborg's backends
by default, and how long a check's result serves."""
from oslo_config import cfg
from oslo_middleware.healthcheck import opts as healthcheck_opts

from cyborg.conf import groups

# What GET /healthcheck checks unless the operator says otherwise: the
# database and the message bus (cyborg.api.health_backends), each a reason
# to take this API process out of a load balancer's pool.
DEFAULT_BACKENDS = ['cyborg_database', 'cyborg_message_bus']

healthcheck_opts_cyborg = [
    cfg.FloatOpt(
        'cache_seconds',
        default=5.0,
        min=0.0,
        help='Seconds the result of a database or message bus check '
             'answers /healthcheck before the next request checks again. '
             'A load balancer checks every 2 s by default (haproxy\'s '
             '"inter"), and each of several balancers checks every API '
             'process; uncached, each of their requests would cost a '
             'database query and a new connection to the broker (a TCP '
             'and AMQP handshake, two lines in RabbitMQ\'s log). 0 checks '
             'on every request.'),
]

GROUP = groups.Group(
    'healthcheck',
    title='The /healthcheck endpoint',
    help='oslo.middleware\'s healthcheck, served by cyborg-api without a '
         'token. Its own options (backends, detailed, '
         'disable_by_file_path, ...) are documented by oslo.middleware; '
         'in cyborg "detailed" answers in detail only to a request with '
         'an administrator\'s token.',
    opts=healthcheck_opts_cyborg)


def set_defaults() -> None:
    """cyborg's backends as the default of oslo.middleware's option, on
    the option objects, which the sample generator reads too."""
    cfg.set_defaults(healthcheck_opts.HEALTHCHECK_OPTS,
                     backends=DEFAULT_BACKENDS)


def register_opts(conf: cfg.ConfigOpts) -> None:
    set_defaults()
    GROUP.register_opts(conf)
    conf.register_opts(healthcheck_opts.HEALTHCHECK_OPTS, group=GROUP.group)
    conf.register_opts(healthcheck_opts.DISABLE_BY_FILE_OPTS,
                       group=GROUP.group)


def list_opts() -> dict[cfg.OptGroup, list[cfg.Opt]]:
    # oslo.middleware's options are in the sample under its own namespace
    # (oslo.middleware.healthcheck); set_defaults() carries cyborg's
    # default of ``backends`` there.
    return GROUP.list_opts()
