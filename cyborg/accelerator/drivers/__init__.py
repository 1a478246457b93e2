"""Loading accelerator drivers by entry point, and what is installed.

The agent loads the drivers named in ``[agent] enabled_drivers``, and those
an operator enabled on its host at runtime (``cyborg.agent.driver_control``).

Entry points are read with ``importlib.metadata`` each time, not through
stevedore, which reads the same entry points but keeps them per process
for as long as ``sys.path`` is unchanged (its ``_cache.Cache._internal``):
a package upgraded under a running agent would stay invisible to it until
a restart, which is what ``reload`` exists to avoid.
"""
import dataclasses
import importlib
import importlib.metadata
import logging
import sys
from typing import Any
from typing import cast

from oslo_config import cfg

from cyborg.accelerator.drivers.base import AcceleratorDriver
from cyborg.common import exception

LOG = logging.getLogger(__name__)

NAMESPACE = 'cyborg.accelerator.driver'


@dataclasses.dataclass(frozen=True)
class Installed:
    """One entry point of the driver namespace."""

    name: str
    # ``module:Class``, as the entry point names it.
    value: str
    # The version of the distribution that declares it; None for an entry
    # point without a distribution (never seen with pip-installed packages).
    version: str | None

    @property
    def module(self) -> str:
        return self.value.split(':', 1)[0].strip()


def installed_drivers() -> dict[str, Installed]:
    """Every entry point of the namespace by name, read afresh.

    ``importlib.invalidate_caches`` first: metadata finders cache each
    sys.path directory by its mtime, and a package upgraded since the last
    call must show its new version. When two distributions declare a name,
    the first on sys.path wins, as the import system would pick it.
    """
    importlib.invalidate_caches()
    found: dict[str, Installed] = {}
    for entry in importlib.metadata.entry_points(group=NAMESPACE):
        dist = getattr(entry, 'dist', None)
        found.setdefault(entry.name, Installed(
            entry.name, entry.value, dist.version if dist else None))
    return found


def available_drivers() -> list[str]:
    return sorted(installed_drivers())


def entry_name(driver: AcceleratorDriver,
               installed: dict[str, Installed]) -> str:
    """The entry-point name of a loaded driver; its ``driver_name`` when
    no entry point names its class (a driver built by hand in a test)."""
    cls = type(driver)
    value = f'{cls.__module__}:{cls.__qualname__}'
    return next((i.name for i in installed.values() if i.value == value),
                cls.driver_name)


def load_drivers(conf: cfg.ConfigOpts) -> list[AcceleratorDriver]:
    """Instantiate every enabled driver, in the configured order.

    Raises DriverNotFound naming every unknown name, before any driver is
    loaded, so that a typo stops the agent at start and not at discovery.
    """
    return list(load_named(conf, conf.agent.enabled_drivers).values())


def load_named(conf: cfg.ConfigOpts, names: list[str]
               ) -> dict[str, AcceleratorDriver]:
    """Instantiate the drivers ``names``, in that order, by name.

    DriverNotFound names every unknown name before any is loaded;
    DriverError says which driver failed to load.
    """
    names = list(dict.fromkeys(names))
    available = installed_drivers()
    unknown = [n for n in names if n not in available]
    if unknown:
        raise exception.DriverNotFound(names=', '.join(unknown),
                                       available=', '.join(sorted(available)))
    loaded = {}
    for name in names:
        try:
            loaded[name] = driver_class(available[name])(conf)
        except exception.DriverError:
            raise
        except Exception as exc:
            # A bad option of the driver (Invalid) included: the agent
            # must say which driver did not start.
            raise exception.DriverError(
                driver=name, reason=f'cannot be loaded: {exc}') from exc
    return loaded


def driver_class(item: Installed) -> type[AcceleratorDriver]:
    """The class an entry point names, imported (not instantiated)."""
    module = importlib.import_module(item.module)
    cls: Any = module
    for part in item.value.split(':', 1)[1].strip().split('.'):
        cls = getattr(cls, part)
    return cast(type[AcceleratorDriver], cls)


def reload_modules(items: list[Installed]) -> dict[str, str]:
    """Import again the modules of ``items`` already imported, their
    submodules first, so that an upgraded package's code is what the next
    load instantiates, without a restart. Modules not imported yet need
    nothing: the next load imports the installed code.

    Returns the error of each item whose module failed to import again
    (the module is then dropped from ``sys.modules``, so that the next
    load tries the installed code afresh).
    """
    errors: dict[str, str] = {}
    for item in items:
        root = item.module
        # Deepest first: a package's __init__ may import from them.
        names = sorted((n for n in list(sys.modules)
                        if n == root or n.startswith(root + '.')),
                       key=lambda n: (-n.count('.'), n))
        for name in names:
            try:
                importlib.reload(sys.modules[name])
            except Exception as exc:
                sys.modules.pop(name, None)
                errors[item.name] = (f'cannot be imported again: '
                                     f'{type(exc).__name__}: {exc}')
                break
        if names and item.name not in errors:
            LOG.info('Reloaded the module(s) of driver %s (version %s): '
                     '%s.', item.name, item.version, ', '.join(names))
    return errors
