"""The drivers of one agent, managed at runtime: installed, enabled, loaded.

A driver is *installed* when an entry point of ``cyborg.accelerator.driver``
names it, and *enabled* when ``[agent] enabled_drivers`` names it, unless
an operator chose otherwise for this host: the choices (``POST
/v2/hosts/{host}/drivers/{name}/enable`` and ``disable``) are kept in the
agent cache (``cyborg.agent.cache``) and outlive restarts; the config file
stays the default for every driver nobody chose for. Enabled drivers are
loaded into the resource tracker; a driver disabled at runtime is unloaded,
and its devices leave the next report the way unplugged devices do (the
conductor keeps those that accelerator requests still hold).
"""
import logging
import threading
from typing import Any

from oslo_config import cfg

from cyborg.accelerator import drivers
from cyborg.accelerator.drivers.base import AcceleratorDriver
from cyborg.agent import cache as agent_cache
from cyborg.agent import resource_tracker
from cyborg.common import device_report
from cyborg.common import exception

LOG = logging.getLogger(__name__)


def enabled_names(conf: cfg.ConfigOpts, choices: dict[str, bool],
                  installed: dict[str, drivers.Installed]) -> list[str]:
    """The drivers to load: the configured ones in their order, then
    those an operator enabled, by name, less those an operator disabled.

    A choice for a driver no longer installed is ignored (and kept: the
    package may come back); an unknown name in the config file is not,
    ``load_named`` refuses it at start.
    """
    names = [n for n in dict.fromkeys(conf.agent.enabled_drivers)
             if choices.get(n, True)]
    extra = sorted(n for n, on in choices.items()
                   if on and n not in names and n in installed)
    for name in sorted(set(choices) - set(installed)):
        LOG.warning('Driver %s was chosen for this host but is not '
                    'installed any more; ignored.', name)
    return names + extra


def load_enabled(conf: cfg.ConfigOpts) -> list[AcceleratorDriver]:
    """The drivers an agent starts with: ``enabled_names`` by the
    choices of the cache in ``[DEFAULT] state_path``. DriverNotFound or
    DriverError as ``load_named``, so that cyborg-agent stops before it
    forks its service."""
    cache = agent_cache.AgentCache.load(agent_cache.cache_path(conf))
    names = enabled_names(conf, cache.driver_choices,
                          drivers.installed_drivers())
    return list(drivers.load_named(conf, names).values())


class DriverControl:
    """Which drivers the tracker runs, and the operator's changes to it.

    ``loaded`` maps entry-point names to the drivers the agent started
    with. Every change holds one lock, so two RPC calls do not interleave;
    the tracker's lock keeps a change between two discovery passes.
    """

    def __init__(self, conf: cfg.ConfigOpts,
                 tracker: resource_tracker.ResourceTracker,
                 loaded: dict[str, AcceleratorDriver]) -> None:
        self.conf = conf
        self.tracker = tracker
        self.loaded = dict(loaded)
        # Entry-point name -> why it could not be loaded.
        self.load_errors: dict[str, str] = {}
        self._lock = threading.Lock()
        self._installed = drivers.installed_drivers()
        # Entry-point name -> driver_name of the drivers not loaded, as
        # their classes say (imported once, for the list and the report).
        self._driver_names: dict[str, str] = {}
        self._apply()

    @classmethod
    def start(cls, conf: cfg.ConfigOpts,
              tracker: resource_tracker.ResourceTracker) -> 'DriverControl':
        """Load the enabled drivers into ``tracker`` (DriverNotFound or
        DriverError as ``load_named``)."""
        installed = drivers.installed_drivers()
        names = enabled_names(conf, tracker.cache.driver_choices, installed)
        return cls(conf, tracker, drivers.load_named(conf, names))

    @classmethod
    def adopt(cls, conf: cfg.ConfigOpts,
              tracker: resource_tracker.ResourceTracker) -> 'DriverControl':
        """Control the drivers the tracker was built with (tests and
        tools build them by hand)."""
        installed = drivers.installed_drivers()
        return cls(conf, tracker, {drivers.entry_name(d, installed): d
                                   for d in tracker.drivers})

    def _driver_name(self, name: str) -> str:
        """The ``driver_name`` of entry point ``name`` (what reports and
        deployables call it); its entry-point name if it cannot be
        imported."""
        if name in self.loaded:
            return type(self.loaded[name]).driver_name
        if name not in self._driver_names:
            try:
                self._driver_names[name] = drivers.driver_class(
                    self._installed[name]).driver_name
            except Exception as exc:
                self.load_errors.setdefault(
                    name, f'cannot be imported: {type(exc).__name__}: {exc}')
                return name
        return self._driver_names[name]

    def _apply(self) -> None:
        """Hand the loaded drivers, the disabled ones and the versions
        to the tracker."""
        choices = self.tracker.cache.driver_choices
        off = [n for n, on in choices.items()
               if not on and n in self._installed and n not in self.loaded]
        disabled = {self._driver_name(n) for n in off}
        versions = {}
        for name in [*self.loaded, *off]:
            version = getattr(self._installed.get(name), 'version', None)
            if version:
                versions[self._driver_name(name)] = version[:64]
        enabled = set(enabled_names(self.conf, choices, self._installed))
        load_failed = {self._driver_name(n): error
                       for n, error in self.load_errors.items()
                       if n in enabled and n not in self.loaded}
        self.tracker.set_drivers(list(self.loaded.values()), disabled,
                                 versions, load_failed)

    def _entry(self, name: str) -> dict[str, Any]:
        item = self._installed.get(name)
        driver_name = self._driver_name(name)
        enabled = name in self.loaded
        state: str | None = None
        error = self.load_errors.get(name)
        if enabled:
            last = self.tracker.states.get(driver_name, {})
            state, error = last.get('state'), last.get('error')
        elif error is not None:
            state = 'failed'
        elif self.tracker.cache.driver_choices.get(name) is False:
            state = 'disabled'
        return {'name': name, 'driver_name': driver_name,
                'version': item.version if item else None,
                'enabled': enabled, 'state': state, 'error': error}

    def entries(self) -> list[dict[str, Any]]:
        """Every installed driver, and every loaded one, by name:
        ``{name, driver_name, version, enabled, state, error}``; ``state``
        is the last discovery pass's (None before the first), ``disabled``
        when an operator turned it off, ``failed`` when it cannot load."""
        with self._lock:
            names = sorted(set(self._installed) | set(self.loaded))
            return [self._entry(name) for name in names]

    def _check_installed(self, name: str) -> None:
        if name not in self._installed and name not in self.loaded:
            raise exception.UnknownDriver(
                name=name, host=self.conf.host,
                installed=', '.join(sorted(self._installed)) or 'none')

    def set_enabled(self, name: str, enabled: bool) -> dict[str, Any]:
        """Load or unload driver ``name``, keep the choice, report.

        Nothing changes when the driver cannot be loaded
        (DriverLoadFailed).
        Returns the driver's entry as ``entries`` gives it, with ``reported``
        (False when the report after the change found no conductor: the
        next periodic pass sends it) and ``changed``.
        """
        with self._lock:
            self._installed = drivers.installed_drivers()
            self._check_installed(name)
            changed = enabled != (name in self.loaded)
            if enabled and changed:
                try:
                    self.loaded.update(drivers.load_named(self.conf, [name]))
                except exception.CyborgException as exc:
                    raise exception.DriverLoadFailed(
                        name=name, host=self.conf.host, reason=exc) from exc
                self.load_errors.pop(name, None)
            elif changed:
                del self.loaded[name]
            self.tracker.cache.record_driver_choice(name, enabled)
            self._apply()
            LOG.info('Driver %s %s on this host at an operator\'s request.',
                     name, 'enabled' if enabled else 'disabled')
        reported = self._report()
        with self._lock:
            return dict(self._entry(name), reported=reported,
                        changed=changed)

    def reload(self) -> list[dict[str, Any]]:
        """Read the entry points again and load the enabled drivers anew
        from their (re-imported) modules, so an upgraded package takes
        effect; then report. Returns ``entries``.

        A driver that fails to load now is left out and listed as
        ``failed`` with the error; the others run.
        """
        with self._lock:
            self._installed = drivers.installed_drivers()
            self._driver_names.clear()
            self.load_errors.clear()
            names = enabled_names(self.conf,
                                  self.tracker.cache.driver_choices,
                                  self._installed)
            missing = [n for n in names if n not in self._installed]
            for name in missing:
                self.load_errors[name] = 'not installed any more'
            wanted = [n for n in names if n in self._installed]
            self.load_errors.update(drivers.reload_modules(
                [self._installed[n] for n in wanted]))
            self.loaded = {}
            for name in wanted:
                if name in self.load_errors:
                    continue
                try:
                    self.loaded.update(drivers.load_named(self.conf, [name]))
                except exception.CyborgException as exc:
                    LOG.error('Driver %s cannot be loaded after a reload: '
                              '%s', name, exc)
                    self.load_errors[name] = str(exc)[
                        :device_report.MAX_ERROR_LENGTH]
            self._apply()
            LOG.info('Reloaded drivers: %s.',
                     ', '.join(f'{n} {self._installed[n].version}'
                               for n in self.loaded) or 'none')
        self._report()
        return self.entries()

    def _report(self) -> bool:
        try:
            self.tracker.update(force=True)
        except Exception as exc:
            LOG.warning('The report after a driver change failed (%s: '
                        '%s); the next periodic report carries it.',
                        type(exc).__name__, exc)
            return False
        return True
