"""The option group most modules of cyborg.conf declare, and a driver's.

Every module of the package that declares options has ``register_opts(conf)``
and ``list_opts()``, which ``cyborg.conf`` finds by those names. A module
whose options are one group of their own makes a :class:`Group` (a driver
family's with :func:`driver_group`) and exports its two methods.
"""
from collections.abc import Sequence

from oslo_config import cfg

from cyborg.conf.lifecycle import lifecycle_opts
from cyborg.conf.mdev import mdev_opts


class Group:
    """An option group and its options, in the order the sample lists them."""

    def __init__(self, name: str, title: str, help: str,
                 opts: Sequence[cfg.Opt]) -> None:
        self.group = cfg.OptGroup(name, title=title, help=help)
        self.opts = list(opts)

    def register_opts(self, conf: cfg.ConfigOpts) -> None:
        conf.register_group(self.group)
        conf.register_opts(self.opts, group=self.group)

    def list_opts(self) -> dict[cfg.OptGroup, list[cfg.Opt]]:
        return {self.group: self.opts}


def driver_group(name: str, title: str, help: str, *, family: str,
                 clean_how: str, opts: Sequence[cfg.Opt] = (),
                 mdevs: str | None = None) -> Group:
    """The group of a driver family: its own ``opts``, then the lifecycle
    options of the ``family`` (a plural noun) whose clean does
    ``clean_how``, then ``mdev_creator`` for the ``mdevs`` (a plural noun)
    when the family's devices offer mediated devices."""
    common = lifecycle_opts(family, clean_how)
    if mdevs is not None:
        common += mdev_opts(mdevs)
    return Group(name, title, help, [*opts, *common])
