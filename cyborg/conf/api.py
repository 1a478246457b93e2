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
    cfg.StrOpt(
        'public_endpoint',
        help='Public URL of the API, used in the links of responses, e.g. '
             '"https://cloud.example.com/accelerator". When unset the URL '
             'the request came in on is used.'),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(api_group)
    conf.register_opts(api_opts, group=api_group)


def list_opts() -> dict[cfg.OptGroup, list[cfg.Opt]]:
    return {api_group: api_opts}
