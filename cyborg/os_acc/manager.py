"""Plugging and unplugging all of one instance's accelerators, and
attaching and detaching some of a running one's, with rollback: the work
behind :mod:`cyborg.os_acc`'s functions."""
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
        return self._plug(instance, arqs, self._plugin(plugin_name), None)

    def attach(self, instance: objects.Instance, arqs: Sequence[object],
               plugin_name: str, guest: object) -> list[objects.VAN]:
        """``plug``, then give each device to the running ``guest``; on
        any failure, detach again what this call attached, undo the rest
        as ``plug`` does, and raise AttachFailed."""
        plugin = self._live_plugin(plugin_name, guest)
        return self._plug(instance, arqs, plugin, guest)

    def _live_plugin(self, name: str, guest: object) -> base.InstancePlugin:
        plugin = self._plugin(name)
        if not plugin.live:
            raise exception.NotLive(plugin=plugin.name)
        plugin.check_guest(guest)
        return plugin

    def _plug(self, instance: objects.Instance, arqs: Sequence[object],
              plugin: base.InstancePlugin, guest: object | None
              ) -> list[objects.VAN]:
        """Both halves of every request; with a ``guest``, attached to it
        too."""
        checked = self.check(instance, arqs, plugin)
        vans: list[objects.VAN] = []
        attached: list[objects.VAN] = []
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
            if guest is not None:
                for van in vans:
                    if van.config is None:
                        continue
                    arq_uuid = van.arq_uuid
                    step = f'the live attach (plugin {plugin.name})'
                    plugin.attach(instance, van, guest)
                    attached.append(van)
            for van in vans:
                van.device_state = objects.DeviceState.PLUGGED
        except Exception as exc:
            LOG.error('%s accelerator request %s %s instance %s failed at '
                      '%s: %s', 'Attaching' if guest else 'Plugging',
                      arq_uuid, 'to' if guest else 'into', instance.uuid,
                      step, exc)
            # A device the guest keeps keeps its device half too.
            stuck = self._detach(instance, attached, guest, plugin)
            kept = {uuid for uuid, _ in stuck}
            left = stuck + self._release(
                instance, [v for v in vans if v.arq_uuid not in kept])
            leftovers = ''
            if left:
                leftovers = (', except for ' + ', '.join(
                    f'{uuid} ({reason})' for uuid, reason in left))
            failed = (exception.AttachFailed if guest is not None
                      else exception.PlugFailed)
            raise failed(
                arq=arq_uuid, instance=instance.uuid, step=step,
                reason=str(exc) or type(exc).__name__,
                leftovers=leftovers) from exc
        LOG.info('%s accelerator request(s) %s %s instance %s',
                 'Attached' if guest else 'Plugged',
                 ', '.join(v.arq_uuid for v in vans),
                 'to running' if guest else 'into', instance.uuid)
        return vans

    def _detach(self, instance: objects.Instance,
                vans: Sequence[objects.VAN], guest: object,
                plugin: base.InstancePlugin | None = None
                ) -> list[tuple[str, str]]:
        """Take each of ``vans`` from ``guest``, newest first, with its
        own plugin (or ``plugin``); (ARQ uuid, reason) of each the guest
        kept."""
        kept = []
        for van in reversed(vans):
            if van.config is None:
                continue
            detacher = self.plugins[van.plugin] if van.plugin else plugin
            try:
                if detacher is None:
                    raise exception.InvalidVAN(van=van.arq_uuid,
                                               reason='it has no plugin')
                detacher.detach(instance, van, guest)
            except Exception as exc:
                LOG.error('Cannot detach accelerator request %s from '
                          'instance %s: %s', van.arq_uuid, instance.uuid,
                          exc)
                kept.append((van.arq_uuid, f'still attached: {exc}'))
        return kept

    def _check_vans(self, instance: objects.Instance,
                    vans: Sequence[objects.VAN]) -> None:
        """InvalidVAN unless each VAN is ``instance``'s, with its driver
        and plugin loaded."""
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

    def unplug(self, instance: objects.Instance,
               vans: Sequence[objects.VAN]) -> None:
        """Release ``vans``, newest first; all are tried, and UnplugFailed
        names those that could not be released."""
        self._check_vans(instance, vans)
        failed = self._release(instance, vans)
        if failed:
            raise exception.UnplugFailed(
                arqs=', '.join(uuid for uuid, _ in failed),
                instance=instance.uuid,
                reason='; '.join(f'{uuid}: {reason}'
                                 for uuid, reason in failed))
        LOG.info('Released accelerator request(s) %s of instance %s',
                 ', '.join(v.arq_uuid for v in vans), instance.uuid)

    def detach(self, instance: objects.Instance,
               vans_or_arqs: Sequence[objects.VAN | object],
               plugin_name: str, guest: object) -> None:
        """Take each device from the running ``guest`` and release it,
        newest first. Each is a VAN (from ``plug`` or ``attach``) or a
        Bound request as the API returns it, whose device ``plugin_name``
        describes afresh; its device half is then left as it is, since
        what that changed is recorded only in the VAN. Every one is
        tried; one the guest keeps stays prepared, and DetachFailed names
        those that could not be detached or released."""
        plugin = self._live_plugin(plugin_name, guest)
        given = [v for v in vans_or_arqs if isinstance(v, objects.VAN)]
        self._check_vans(instance, given)
        for van in given:
            if van.plugin is not None and not self.plugins[van.plugin].live:
                raise exception.InvalidVAN(
                    van=van.arq_uuid,
                    reason=f'its plugin {van.plugin} cannot detach from a '
                           'running instance')
        checked = iter(self.check(
            instance, [v for v in vans_or_arqs
                       if not isinstance(v, objects.VAN)], plugin))
        vans = []
        for item in vans_or_arqs:
            if isinstance(item, objects.VAN):
                vans.append(item)
                continue
            arq, driver = next(checked)
            van = driver.new_van(arq)
            van.config = plugin.plug(instance, van)
            van.plugin = plugin.name
            vans.append(van)
        failed = []
        for van in reversed(vans):
            if van.device_state == objects.DeviceState.RELEASED:
                continue
            kept = self._detach(instance, [van], guest, plugin)
            failed += kept or self._release(instance, [van])
        if failed:
            raise exception.DetachFailed(
                arqs=', '.join(uuid for uuid, _ in failed),
                instance=instance.uuid,
                reason='; '.join(f'{uuid}: {reason}'
                                 for uuid, reason in failed))
        LOG.info('Detached accelerator request(s) %s from running instance '
                 '%s', ', '.join(v.arq_uuid for v in vans), instance.uuid)

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
