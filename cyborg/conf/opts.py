"""Entry points for oslo-config-generator: every cyborg option group."""
from oslo_config import cfg
from oslo_log import log

from cyborg import conf as cyborg_conf
from cyborg.common import rpc
from cyborg.conf import database
from cyborg.conf import healthcheck
from cyborg.conf import profiler


def list_opts() -> list[tuple[str | cfg.OptGroup, list[cfg.Opt]]]:
    """Return (group, options) pairs, the shape the generator expects."""
    result: list[tuple[str | cfg.OptGroup, list[cfg.Opt]]] = []
    for module in cyborg_conf.option_modules():
        result.extend(module.list_opts().items())
    return result


# oslo.service's looping calls, which run the periodic tasks, log each
# sleep at DEBUG: with the placement probe's 0.25 s tick that is four lines
# a second of a debug log that says nothing.
_LOG_LEVELS = ['oslo_service.backend._threading.loopingcall=INFO']


def set_log_defaults() -> None:
    """cyborg's default levels of library loggers."""
    log.set_defaults(
        default_log_levels=log.get_default_log_levels() + _LOG_LEVELS)


def set_defaults() -> None:
    """Apply cyborg's defaults for library options to the sample."""
    database.register_opts(cfg.CONF)
    profiler.set_sample_defaults()
    set_log_defaults()
    rpc.set_defaults()
    healthcheck.set_defaults()
