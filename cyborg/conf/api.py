"""Options of the [api] group: where and how cyborg-api serves HTTP."""
from oslo_config import cfg

from cyborg.conf import groups

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
             'on one listening socket; above 1, under oslo.service\'s '
             'process launcher, which replaces one that dies. One Python '
             'process uses one core at a time, so set this to the number '
             'of cores the API may use. Under a WSGI server such as uwsgi, '
             'as production deployments run the API, this is unused.'),
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
        'bind_batch_size',
        default=32,
        min=1,
        help='Accelerator-request PATCHes (binds and unbinds) that threads '
             'of one cyborg-api process send at the same moment go to a '
             'conductor in one RPC call, up to this many HTTP requests per '
             'call, and are applied there in one transaction, with one '
             'event to Nova for all of their binds; DELETEs the same way, '
             'in calls of their own. Each HTTP request still succeeds or '
             'fails on its own: when one is refused, the others are '
             'applied again one by one. 1 sends each PATCH and DELETE on '
             'its own; batches also need every conductor at RPC 1.11 or '
             'later (see [upgrade_levels]).'),
    cfg.IntOpt(
        'max_limit',
        default=1000,
        min=1,
        help='The most items one page of a list returns (microversion 2.4 '
             'and later); a larger "limit" is reduced to this.'),
    cfg.IntOpt(
        'max_accelerators_per_group',
        default=32,
        min=1,
        max=2147483647,
        help='The most accelerators one request group of a device profile '
             'may ask for: the sum of its resources:<CLASS> counts, except '
             'the amounts that are no accelerators (VGPU_DISPLAY_HEAD, '
             'NET_BW_EGR_KILOBIT_PER_SEC, NET_BW_IGR_KILOBIT_PER_SEC, '
             'MEM_ENCRYPTION_CONTEXT). One group is served by one resource '
             'provider, one device: 32 covers the virtual functions or '
             'vGPUs an instance takes from one card.'),
    cfg.IntOpt(
        'max_accelerators_per_profile',
        default=64,
        min=1,
        max=2147483647,
        help='The most accelerators one device profile may ask for, '
             'summed over its groups: every accelerator is one accelerator '
             'request that each instance using the profile creates, stores '
             'and binds. 64 covers 8 GPUs per host and a few dozen virtual '
             'functions. Device profiles are refused above it, and so are '
             'accelerator requests from profiles created before it was '
             'lowered: set it on the conductors too, which create them.'),
    cfg.IntOpt(
        'max_groups_per_profile',
        default=16,
        min=1,
        help='The most request groups one device profile may have. Each '
             'group becomes a request group in the instance\'s placement '
             'query, whose cost grows quickly with the number of groups.'),
    cfg.IntOpt(
        'client_socket_timeout',
        default=30,
        min=1,
        help='Seconds cyborg-api keeps a connection on which nothing '
             'arrives: one whose request headers or body stopped coming, '
             'or an idle keep-alive connection between requests. A request '
             'being served is never cut. A client that keeps sending, '
             'however slowly, is not cut either: in production put a '
             'reverse proxy with request timeouts in front of the API (see '
             'the install guide), and keep this above the proxy\'s '
             'keep-alive timeout towards the API. Only when cyborg-api '
             'serves HTTP itself; under uwsgi see its socket-timeout.'),
    cfg.IntOpt(
        'connection_limit',
        default=100,
        min=1,
        help='Connections each cyborg-api process keeps open at once; '
             'further clients wait in the listening socket\'s queue until '
             'one closes. Connections that send nothing are closed after '
             'client_socket_timeout. Each connection takes one to three '
             'file descriptors (large bodies are buffered in temporary '
             'files): keep this well below the open files limit of the '
             'service (ulimit -n). Only when cyborg-api serves HTTP '
             'itself.'),
]

GROUP = groups.Group(
    'api',
    title='API options',
    help='The REST API service.',
    opts=api_opts)

register_opts = GROUP.register_opts
list_opts = GROUP.list_opts
