"""The global configuration object, with every cyborg group registered."""
import functools
import importlib
import pkgutil
import types

from oslo_config import cfg

CONF = cfg.CONF

# The generator's entry points: they declare no options and load
# oslo.messaging, which a process importing the CONF need not.
_ENTRY_POINTS = frozenset({'opts'})


@functools.cache
def option_modules() -> tuple[types.ModuleType, ...]:
    """Every module of this package declaring options, [DEFAULT]'s first,
    then by name: those with ``register_opts(conf)`` and ``list_opts()``,
    the latter returning {group: [option, ...]} in the sample's order.
    The others (``groups``, ``keystone``, ...) help them declare theirs.
    Found once per process: every app and test registers on a ConfigOpts
    of its own."""
    modules = [importlib.import_module(f'{__name__}.{info.name}')
               for info in pkgutil.iter_modules(__path__)
               if info.name not in _ENTRY_POINTS]
    declaring = [module for module in modules
                 if hasattr(module, 'register_opts')]
    return tuple(sorted(declaring, key=lambda module:
                        module.__name__ != f'{__name__}.default'))


def register_opts(conf: cfg.ConfigOpts) -> None:
    """Register every cyborg group on ``conf`` (done for the global CONF
    here; an app or a test may build its own)."""
    for module in option_modules():
        module.register_opts(conf)


register_opts(CONF)
