"""Running iproute2's devlink for a driver: eswitch modes and health
reporters, from its JSON output.

devlink(8) prints JSON with ``-j`` (iproute2 ``devlink/devlink.c``), one
object per section, the devlink handle (``pci/<address>``, or
``pci/<address>/<port index>`` for a port) as the key:

* ``devlink -j dev eswitch show pci/<address>`` (``pr_out_eswitch``)::

    {"dev":{"pci/0000:3b:00.0":{"mode":"legacy","inline-mode":"none",
    "encap-mode":"basic"}}}

* ``devlink -j health show`` (``pr_out_health``), every reporter of every
  device and port, an array per handle::

    {"health":{"pci/0000:3b:00.0":[{"reporter":"fw","state":"healthy",
    "error":0,"recover":0,"auto_dump":true}, ...],
    "pci/0000:3b:00.0/65535":[{"reporter":"tx", ...}]}}

A refusal is devlink's exit status 1 with the kernel's extended ack on
stderr (``Error: mlx5_core: <message>.``, lib/libnetlink.c) and the errno
(``kernel answers: <strerror>``, lib/mnl_utils.c), which
``privileged.execute`` carries in its DeviceActionError.
"""
import dataclasses
import json
from typing import Any

from cyborg.accelerator.drivers import privileged
from cyborg.common import exception

#: The eswitch modes of devlink-dev(8) a layout may ask for
#: (``switchdev_inactive`` is a transient mode of a few drivers).
ESWITCH_MODES = ('legacy', 'switchdev')
#: The reporter states devlink prints (DEVLINK_HEALTH_REPORTER_STATE_*).
HEALTHY = 'healthy'
ERROR = 'error'
# Seconds a read may take: one netlink round trip, a few milliseconds.
_READ_TIMEOUT = 10.0
# Seconds a mode change may take: mlx5_core unloads and loads the
# representors of every VF (up to 127 per port on a ConnectX-6 Dx),
# each a netdev of its own; several seconds on a port with many VFs.
_SET_TIMEOUT = 120.0


@dataclasses.dataclass(frozen=True)
class Reporter:
    """One devlink health reporter as ``devlink health show`` prints it."""

    handle: str
    name: str
    state: str
    errors: int
    recovers: int

    @property
    def address(self) -> str | None:
        """The PCI address of the device the reporter belongs to (for a
        port's, that of the port's device); None for another bus."""
        return handle_address(self.handle)


def handle_address(handle: str) -> str | None:
    """The PCI address in a devlink handle (``pci/<address>`` or
    ``pci/<address>/<port index>``); None for another bus."""
    bus, _, rest = handle.partition('/')
    if bus != 'pci' or not rest:
        return None
    return rest.split('/', 1)[0].lower()


def _json(text: str, what: str) -> dict[str, Any]:
    try:
        found = json.loads(text)
    except ValueError as exc:
        raise ValueError(f'{what} is not JSON: {exc}') from None
    if not isinstance(found, dict):
        raise ValueError(f'{what} is not a JSON object')
    return found


def parse_eswitch(text: str, address: str) -> str:
    """The eswitch mode ``devlink -j dev eswitch show pci/<address>``
    printed; ValueError when it printed something else."""
    found = _json(text, 'devlink dev eswitch show')
    attributes = found.get('dev', {}).get(f'pci/{address}')
    if not isinstance(attributes, dict) or not isinstance(
            attributes.get('mode'), str):
        raise ValueError(f'devlink dev eswitch show printed no mode for '
                         f'pci/{address}: {text.strip()[:200]}')
    return str(attributes['mode'])


def parse_health(text: str) -> list[Reporter]:
    """Every reporter ``devlink -j health show`` printed; ValueError when
    it printed something else."""
    found = _json(text, 'devlink health show')
    sections = found.get('health', {})
    if not isinstance(sections, dict):
        raise ValueError('devlink health show printed no health section')
    reporters = []
    for handle, entries in sections.items():
        for entry in entries if isinstance(entries, list) else ():
            try:
                reporters.append(Reporter(
                    handle=handle, name=str(entry['reporter']),
                    state=str(entry['state']), errors=int(entry['error']),
                    recovers=int(entry['recover'])))
            except (KeyError, TypeError, ValueError):
                raise ValueError(f'devlink health show printed a reporter '
                                 f'of {handle} without reporter, state, '
                                 f'error and recover: {entry!r}') from None
    return reporters


class Devlink:
    """The devlink program at ``command``, run through ``root_helper``
    (``[agent] root_helper``) for what needs CAP_NET_ADMIN."""

    def __init__(self, command: str, root_helper: str = '') -> None:
        self.command = command
        self.root_helper = root_helper

    def _run(self, args: list[str], action: str, device: str,
             privileged_: bool, timeout: float) -> str:
        return privileged.execute(
            [self.command, *args], action=action, device=device,
            root_helper=self.root_helper if privileged_ else '',
            timeout=timeout)

    def eswitch_mode(self, address: str) -> str:
        """The eswitch mode of the devlink device ``pci/<address>``.
        DeviceActionError when devlink cannot tell (no such device, no
        eswitch: ``kernel answers: Operation not supported``)."""
        action = 'read the eswitch mode'
        # DEVLINK_CMD_ESWITCH_GET is GENL_ADMIN_PERM (net/devlink/
        # netlink_gen.c): reading it takes the root helper too.
        text = self._run(['-j', 'dev', 'eswitch', 'show', f'pci/{address}'],
                         action, address, True, _READ_TIMEOUT)
        try:
            return parse_eswitch(text, address)
        except ValueError as exc:
            raise exception.DeviceActionError(
                action=action, device=address, reason=str(exc)) from exc

    def set_eswitch_mode(self, address: str, mode: str) -> None:
        """``devlink dev eswitch set pci/<address> mode <mode>``;
        DeviceActionError with the kernel's reason when it refuses."""
        if mode not in ESWITCH_MODES:
            raise exception.Invalid(
                reason=f'eswitch_mode {mode!r} is not one of '
                       f'{", ".join(ESWITCH_MODES)}')
        self._run(['dev', 'eswitch', 'set', f'pci/{address}', 'mode', mode],
                  'set the eswitch mode', address, True, _SET_TIMEOUT)

    def health(self) -> list[Reporter]:
        """Every health reporter of every devlink device and port.

        One dump for all: ``devlink health show <handle>`` dumps one
        device's reporters only since iproute2 6.6 (its dump selector,
        commit 70faecdc), before which it asks for a reporter name; one
        process for all ports costs less than one per port anyway.
        DEVLINK_CMD_HEALTH_REPORTER_GET needs no privilege
        (net/devlink/netlink_gen.c), so no root helper runs."""
        action = 'read the health reporters'
        text = self._run(['-j', 'health', 'show'], action, 'devlink', False,
                         _READ_TIMEOUT)
        try:
            return parse_health(text)
        except ValueError as exc:
            raise exception.DeviceActionError(
                action=action, device='devlink', reason=str(exc)) from exc
