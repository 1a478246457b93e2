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
from cyborg.conf import placement
from cyborg.conf import upgrade_levels

CONF = cfg.CONF

default.register_opts(CONF)
agent.register_opts(CONF)
api.register_opts(CONF)
conductor.register_opts(CONF)
database.register_opts(CONF)
fake_driver.register_opts(CONF)
fpga.register_opts(CONF)
generic_pci.register_opts(CONF)
glance.register_opts(CONF)
gpu.register_opts(CONF)
nic.register_opts(CONF)
nova.register_opts(CONF)
placement.register_opts(CONF)
upgrade_levels.register_opts(CONF)
