"""The global configuration object, with every cyborg group registered."""
from oslo_config import cfg

from cyborg.conf import agent
from cyborg.conf import api
from cyborg.conf import conductor
from cyborg.conf import database
from cyborg.conf import default
from cyborg.conf import fake_driver
from cyborg.conf import fpga
from cyborg.conf import generic_pci
from cyborg.conf import glance
from cyborg.conf import gpu
from cyborg.conf import nic
from cyborg.conf import nova
from cyborg.conf import npu
from cyborg.conf import placement
from cyborg.conf import qat
from cyborg.conf import ssd
from cyborg.conf import upgrade_levels

CONF = cfg.CONF


def register_opts(conf: cfg.ConfigOpts) -> None:
    """Register every cyborg group on ``conf`` (done for the global CONF
    here; an app or a test may build its own)."""
    for module in (default, agent, api, conductor, database, fake_driver,
                   fpga, generic_pci, glance, gpu, nic, nova, npu, placement,
                   qat, ssd, upgrade_levels):
        module.register_opts(conf)


register_opts(CONF)
