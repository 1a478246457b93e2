"""Options of the [api] group: where and how cyborg-api serves HTTP."""
from oslo_config import cfg

api_group = cfg.OptGroup(
    'api',
    title='API options',
    help='The REST API service.')

api_opts = [
    cfg.HostAddressOpt(
        'host_ip',
        default='127.0.0.1',
        help='Address cyborg-api listens on when it runs its own HTTP '
             'server. Under a WSGI server such as uwsgi this is unused.'),
    cfg.PortOpt(
        'port',
        default=6666,
        help='Port cyborg-api listens on when it runs its own HTTP server.'),
    cfg.IntOpt(
        'workers',
        default=1,
        min=1,
        help='Processes cyborg-api runs when it serves HTTP itself, all '
             'on one listening socket. One Python process uses one core '
             'at a time, so set this to the number of cores the API may '
             'use. Under a WSGI server such as uwsgi this is unused.'),
    cfg.IntOpt(
        'threads',
        default=8,
        min=1,
        help='Threads of each cyborg-api process; each handles one '
             'request at a time.'),
    cfg.StrOpt(
        'public_endpoint',
        help='Public URL of the API, used in the links of responses, e.g. '
             '"https://cloud.example.com/accelerator". When unset the URL '
             'the request came in on is used.'),
    cfg.StrOpt(
        'auth_strategy',
        default='keystone',
        choices=[('keystone', 'Validate tokens with keystonemiddleware; '
                              'configure [keystone_authtoken].'),
                 ('noauth', 'No token validation, for development and the '
                            'all-in-one service only. The token "admin" '
                            'gives an administrator of project "admin"; '
                            'X-Roles, X-Project-Id and X-Service-Roles '
                            'headers are trusted as sent.')],
        help='How API requests are authenticated.'),
    cfg.BoolOpt(
        'require_service_token',
        default=True,
        help='Binding and unbinding accelerator requests, deleting them by '
             'instance and deleting a bound request are Nova\'s business: '
             'require a valid service token (X-Service-Token with one of '
             '[keystone_authtoken] service_token_roles) for them. Nova '
             'sends one when [service_user] send_service_user_token = '
             'true. Disable only when Nova cannot send service tokens.'),
    cfg.IntOpt(
        'create_batch_size',
        default=32,
        min=1,
        help='Accelerator requests that threads of one cyborg-api process '
             'create at the same moment go to a conductor in one RPC call, '
             'up to this many HTTP requests per call: under load this '
             'saves most of the messaging cost of each create, and a '
             'request made while the API is idle still leaves at once. '
             'Each HTTP request still succeeds or fails on its own. 1 '
             'sends every create on its own; batches also need every '
             'conductor at RPC 1.4 or later (see [upgrade_levels]).'),
    cfg.IntOpt(
        'max_limit',
        default=1000,
        min=1,
        help='The most items one page of a list returns (microversion 2.4 '
             'and later); a larger "limit" is reduced to this.'),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(api_group)
    conf.register_opts(api_opts, group=api_group)


def list_opts() -> dict[cfg.OptGroup, list[cfg.Opt]]:
    return {api_group: api_opts}
