"""What every cyborg command does before it starts its service."""
from oslo_config import cfg
from oslo_log import log

from cyborg import conf as cyborg_conf
from cyborg import version
from cyborg.common import rpc


def parse_args(argv: list[str], conf: cfg.ConfigOpts = cyborg_conf.CONF,
               default_config_files: list[str] | None = None) -> None:
    """Register logging options, parse the command line and files."""
    log.register_options(conf)
    rpc.set_defaults()
    conf(argv, project='cyborg', version=version.version_string(),
         default_config_files=default_config_files)
    log.setup(conf, 'cyborg')
