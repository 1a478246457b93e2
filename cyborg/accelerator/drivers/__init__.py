"""Loading the drivers named in ``[agent] enabled_drivers`` with stevedore."""
from typing import Any
from typing import cast

import stevedore
from oslo_config import cfg

from cyborg.accelerator.drivers.base import AcceleratorDriver
from cyborg.common import exception

NAMESPACE = 'cyborg.accelerator.driver'


def available_drivers() -> list[str]:
    return sorted(stevedore.ExtensionManager(NAMESPACE).names())


def load_drivers(conf: cfg.ConfigOpts) -> list[AcceleratorDriver]:
    """Instantiate every enabled driver, in the configured order.

    Raises DriverNotFound naming every unknown name, before any driver is
    loaded, so that a typo stops the agent at start and not at discovery.
    """
    names = list(dict.fromkeys(conf.agent.enabled_drivers))
    available = available_drivers()
    unknown = [n for n in names if n not in available]
    if unknown:
        raise exception.DriverNotFound(names=', '.join(unknown),
                                       available=', '.join(available))
    manager: stevedore.NamedExtensionManager[AcceleratorDriver]
    manager = stevedore.NamedExtensionManager(
        NAMESPACE, names, invoke_on_load=True, invoke_args=(conf,),
        name_order=True, propagate_map_exceptions=True,
        on_load_failure_callback=_raise_load_failure)
    # invoke_on_load: every extension holds its driver.
    return [cast(AcceleratorDriver, ext.obj) for ext in manager]


def _raise_load_failure(manager: Any, entrypoint: Any,
                        error: BaseException) -> None:
    raise exception.DriverError(driver=getattr(entrypoint, 'name', '?'),
                                reason=f'cannot be loaded: {error}')
