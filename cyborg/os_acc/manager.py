"""Plugging and unplugging all of one instance's accelerators, with
rollback: the work behind :mod:`cyborg.os_acc`'s functions."""
import logging
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence

from cyborg.os_acc import base
from cyborg.os_acc import exception
from cyborg.os_acc import objects

LOG = logging.getLogger(__name__)


class Manager:
    """Loaded drivers and plugins, each under its ``name``. A request
    goes to the first driver, in name order, that can handle it."""

    def __init__(self, drivers: Iterable[base.DeviceDriver],
                 plugins: Iterable[base.InstancePlugin]) -> None:
        self.drivers = {d.name: d for d in sorted(drivers,
                                                  key=lambda d: d.name)}
        self.plugins = {p.name: p for p in sorted(plugins,
                                                  key=lambda p: p.name)}

    def host_info(self) -> objects.HostInfo:
        return objects.HostInfo(
            drivers=tuple(d.describe() for d in self.drivers.values()),
            plugins=tuple(p.describe() for p in self.plugins.values()))

    def _plugin(self, name: str) -> base.InstancePlugin:
        try:
            return self.plugins[name]
        except KeyError:
            raise exception.NoSuchPlugin(
                name=name,
                loaded=', '.join(self.plugins) or 'none') from None

    def _driver_for(self, arq: objects.ARQ) -> base.DeviceDriver:
        for driver in self.drivers.values():
            if driver.can_handle(arq):
                return driver
        raise ValueError(
            f'no os-acc driver handles attach handle type '
            f'{arq.attach_handle_type!r} (loaded: '
            f'{", ".join(self.drivers) or "none"})')

    def check(self, instance: objects.Instance, arqs: Sequence[object],
              plugin: base.InstancePlugin
              ) -> list[tuple[objects.ARQ, base.DeviceDriver]]:
        """Each request of ``arqs``, read and checked, with its driver;
        InvalidARQ names the first that cannot be plugged."""
        checked: list[tuple[objects.ARQ, base.DeviceDriver]] = []
        seen: set[str] = set()
        for position, raw in enumerate(arqs):
            label = f'at index {position}'
            if isinstance(raw, Mapping) and isinstance(raw.get('uuid'), str):
                label = raw['uuid']
            try:
                arq = objects.ARQ.from_dict(raw)
                if arq.uuid in seen:
                    raise ValueError('it is given twice')
                seen.add(arq.uuid)
                if arq.state != objects.BOUND:
                    raise ValueError(f'it is {arq.state}, not '
                                     f'{objects.BOUND}')
                if arq.instance_uuid != instance.uuid:
                    raise ValueError(f'it is bound to instance '
                                     f'{arq.instance_uuid}, not '
                                     f'{instance.uuid}')
                driver = self._driver_for(arq)
                driver.validate(arq)
                if not plugin.supports(arq.attach_handle_type):
                    raise ValueError(f'instance plugin {plugin.name} cannot '
                                     f'attach {arq.attach_handle_type} '
                                     'handles')
            except ValueError as exc:
                raise exception.InvalidARQ(arq=label, reason=str(exc)
                                           ) from exc
            checked.append((arq, driver))
        return checked

    def plug(self, instance: objects.Instance, arqs: Sequence[object],
             plugin_name: str) -> list[objects.VAN]:
        """Prepare and plug every request of ``arqs``; on any failure,
        undo what was done, newest first, and raise PlugFailed."""
        plugin = self._plugin(plugin_name)
        checked = self.check(instance, arqs, plugin)
        vans: list[objects.VAN] = []
        arq_uuid, step = '', ''
        try:
            for arq, driver in checked:
                arq_uuid = arq.uuid
                step = f'the device half (driver {driver.name})'
                van = driver.prepare_van(arq)
                vans.append(van)
                step = f'the instance half (plugin {plugin.name})'
                van.config = plugin.plug(instance, van)
                van.plugin = plugin.name
            for van in vans:
                arq_uuid = van.arq_uuid
                step = f'the post-plug check (driver {van.driver})'
                self.drivers[van.driver].post_plug(van)
                van.device_state = objects.DeviceState.PLUGGED
        except Exception as exc:
            LOG.error('Plugging accelerator request %s into instance %s '
                      'failed at %s: %s', arq_uuid, instance.uuid, step, exc)
            left = self._release(instance, vans)
            leftovers = ''
            if left:
                leftovers = (', except for ' + ', '.join(
                    f'{uuid} ({reason})' for uuid, reason in left))
            raise exception.PlugFailed(
                arq=arq_uuid, instance=instance.uuid, step=step,
                reason=str(exc) or type(exc).__name__,
                leftovers=leftovers) from exc
        LOG.info('Plugged accelerator request(s) %s into instance %s',
                 ', '.join(v.arq_uuid for v in vans), instance.uuid)
        return vans

    def unplug(self, instance: objects.Instance,
               vans: Sequence[objects.VAN]) -> None:
        """Release ``vans``, newest first; all are tried, and UnplugFailed
        names those that could not be released."""
        for van in vans:
            if van.instance_uuid != instance.uuid:
                raise exception.InvalidVAN(
                    van=van.arq_uuid,
                    reason=f'it belongs to instance {van.instance_uuid}, '
                           f'not {instance.uuid}')
            if van.driver not in self.drivers:
                raise exception.InvalidVAN(
                    van=van.arq_uuid,
                    reason=f'its driver {van.driver} is not loaded')
            if van.plugin is not None and van.plugin not in self.plugins:
                raise exception.InvalidVAN(
                    van=van.arq_uuid,
                    reason=f'its plugin {van.plugin} is not loaded')
        failed = self._release(instance, vans)
        if failed:
            raise exception.UnplugFailed(
                arqs=', '.join(uuid for uuid, _ in failed),
                instance=instance.uuid,
                reason='; '.join(f'{uuid}: {reason}'
                                 for uuid, reason in failed))
        LOG.info('Released accelerator request(s) %s of instance %s',
                 ', '.join(v.arq_uuid for v in vans), instance.uuid)

    def _release(self, instance: objects.Instance,
                 vans: Sequence[objects.VAN]) -> list[tuple[str, str]]:
        """Undo both halves of each VAN, newest first; (ARQ uuid, reason)
        of each that could not be undone, the others marked released."""
        failed = []
        for van in reversed(vans):
            if van.device_state == objects.DeviceState.RELEASED:
                continue
            try:
                if van.plugin is not None:
                    self.plugins[van.plugin].unplug(instance, van)
                self.drivers[van.driver].unprepare_van(van)
            except Exception as exc:
                LOG.error('Cannot release accelerator request %s of '
                          'instance %s: %s', van.arq_uuid, instance.uuid,
                          exc)
                failed.append((van.arq_uuid, str(exc) or
                               type(exc).__name__))
                continue
            van.device_state = objects.DeviceState.RELEASED
        return failed
