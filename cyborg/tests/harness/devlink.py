"""An emulated devlink(8) for mlx5_core ports of the fake sysfs trees.

The nvidia_nic driver runs iproute2's ``devlink`` to set and read a
port's eswitch mode and its health reporters; on a test host there is no
mlx5 device behind it. :func:`install` writes a ``devlink`` program into
a directory (``[nvidia_nic_devices] devlink_command`` names it) that runs
:func:`main` for one tree: it keeps each port's devlink state in
``<root>/devlink/pci/<address>.json`` beside ``sys`` (the kernel keeps it
in memory: there is no sysfs file of it) and prints what devlink prints.

What it answers, with the source of each:

* ``devlink [-j] dev eswitch show pci/<address>``: iproute2
  ``devlink/devlink.c`` ``cmd_dev_eswitch_show`` / ``pr_out_eswitch``:
  ``{"dev":{"pci/<address>":{"mode":"legacy","inline-mode":"none",
  "encap-mode":"basic"}}}`` with ``-j`` (compact: iproute2's json_writer
  puts no spaces), ``pci/<address>: mode legacy inline-mode none
  encap-mode basic`` without.
* ``devlink dev eswitch set pci/<address> mode {legacy|switchdev}``:
  prints nothing on success. Switching to switchdev registers a
  representor netdev per VF under the port's PCI device (``net/<name>``
  with ``phys_port_name`` ``pf<N>vf<M>``, net/devlink/port.c
  ``__devlink_port_phys_port_name_get``); back to legacy removes them.
* ``devlink [-j] health show [pci/<address>]``: ``pr_out_health``:
  ``{"health":{"pci/<address>":[{"reporter":"fw","state":"healthy",
  "error":0,"recover":0,"auto_dump":true}, ...],
  "pci/<address>/65535":[{"reporter":"tx", ...}]}}``; a handle selects
  one device's reporters (iproute2 6.6's dump selector). mlx5_core
  registers fw and fw_fatal (health.c), vnic (diag/reporter_vnic.c) on
  the device and tx, rx (en/reporter_tx.c, reporter_rx.c) on the uplink
  port, whose index is ``vhca_id << 16 | 0xffff``
  (``mlx5_esw_vport_to_devlink_port_index``); the grace periods are
  mlx5's (fw_fatal 60000 ms on a PF, tx and rx 500 ms).

What it refuses, as mlx5_core refuses it
(drivers/net/ethernet/mellanox/mlx5/core/eswitch_offloads.c
``mlx5_devlink_eswitch_mode_set``, eswitch.c ``mlx5_eswitch_check`` and
``mlx5_esw_try_lock``), each with devlink's exit status 1 and the kernel's
extended ack (``Error: mlx5_core: <message>.``, iproute2
lib/libnetlink.c ``print_ext_ack_msg``) then its errno (``kernel answers:
<strerror>``, lib/mnl_utils.c ``mnlu_gen_socket_sndrcv``) on stderr:

* a device that is no devlink instance: ``kernel answers: No such
  device``;
* a port that is no eswitch manager (a BlueField host port whose Arm
  cores own the eswitch; state ``eswitch_manager`` false): ``kernel
  answers: Operation not supported``;
* a mode change while TC flows are offloaded on the eswitch (its user
  count, state ``offloaded_flows``): ``Error: mlx5_core: Can't change
  mode, E-Switch is busy.`` / ``kernel answers: Device or resource busy``
  (asked even for the mode it has: the lock is taken first);
* switchdev while devlink traps are active (state ``active_traps``):
  ``Error: mlx5_core: Can't change mode while devlink traps are
  active.`` / ``kernel answers: Operation not supported``;
* an unknown mode word: ``Unknown eswitch mode "<word>"`` (devlink.c
  ``eswitch_mode_get``), before any netlink message.

Every command it ran is a JSON line in ``<root>/devlink.log``
(:func:`read_log`), with ``error`` when it refused. Not emulated: the
permission check (eswitch commands are GENL_ADMIN_PERM; the emulator
answers any user), devlink instances of VFs, and the network-namespace
refusal.
"""
import json
import os
import pathlib
import sys
from collections.abc import Sequence
from typing import Any

from cyborg.tests.harness.sysfs import SysfsTree

LOG_NAME = 'devlink.log'
# The uplink's devlink port index with vhca_id 0.
UPLINK_PORT = 0xffff
# The reporters mlx5_core registers on a PF, in the order a dump lists
# them: the device's, then its uplink port's.
DEVICE_REPORTERS = [
    {'reporter': 'fw', 'auto_dump': True},
    {'reporter': 'fw_fatal', 'grace_period': 60000, 'auto_recover': True,
     'auto_dump': True},
    {'reporter': 'vnic'}]
PORT_REPORTERS = [
    {'reporter': 'tx', 'grace_period': 500, 'auto_recover': True,
     'auto_dump': True},
    {'reporter': 'rx', 'grace_period': 500, 'auto_recover': True,
     'auto_dump': True}]
_ENODEV = 'kernel answers: No such device'
_EOPNOTSUPP = 'kernel answers: Operation not supported'
_EBUSY = 'kernel answers: Device or resource busy'
_MODES = ('legacy', 'switchdev')


def state_path(root: str | os.PathLike[str], address: str) -> pathlib.Path:
    return pathlib.Path(root) / 'devlink' / 'pci' / f'{address}.json'


def read_state(root: str | os.PathLike[str], address: str
               ) -> dict[str, Any] | None:
    """The devlink state of the port at ``address``; None when it is no
    devlink instance."""
    try:
        return dict(json.loads(state_path(root, address).read_text()))
    except FileNotFoundError:
        return None


def write_state(root: str | os.PathLike[str], address: str,
                state: dict[str, Any]) -> None:
    path = state_path(root, address)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Whole or not at all: the kernel emulator reads it from another
    # process.
    partial = path.with_suffix('.tmp')
    partial.write_text(json.dumps(state))
    os.replace(partial, path)


def set_reporter(root: str | os.PathLike[str], address: str, name: str,
                 **values: Any) -> None:
    """Change reporter ``name`` of the port (``state``, ``error``,
    ``recover``), as mlx5_core would on an error or a recovery."""
    state = read_state(root, address)
    assert state is not None, f'{address} is no devlink instance'
    [reporter] = [r for r in state['reporters'] if r['reporter'] == name]
    reporter.update(values)
    write_state(root, address, state)


def add_mlx5_nic(tree: SysfsTree, address: str, device: int = 0x101d,
                 interface: str = 'ens1f0', sriov_totalvfs: int = 8,
                 vhca_id: int = 0, **state: Any) -> pathlib.Path:
    """A ConnectX port (0x15b3:``device``, ConnectX-6 Dx by default) on
    mlx5_core: its PCI function, with ``sriov_vf_device`` 101e (the
    "ConnectX Family mlx5Gen Virtual Function" of main.c), network
    interface ``interface`` and devlink state (legacy eswitch, healthy
    reporters; ``state`` overrides). Returns its directory."""
    dev = tree.add_function(address, 0x15b3, device, 0x020000,
                            driver='mlx5_core', subsystem_vendor=0x15b3,
                            subsystem_device=0x0016,
                            sriov_totalvfs=sriov_totalvfs)
    (dev / 'sriov_vf_device').write_text('101e\n')
    tree.add_net_interface(address, interface)
    reporters = [dict(r, state='healthy', error=0, recover=0)
                 for r in DEVICE_REPORTERS]
    reporters += [dict(r, state='healthy', error=0, recover=0, port=True)
                  for r in PORT_REPORTERS]
    write_state(tree.root, address, {
        'eswitch': {'mode': 'legacy', 'inline-mode': 'none',
                    'encap-mode': 'basic'},
        'eswitch_manager': True, 'offloaded_flows': 0, 'active_traps': 0,
        'port_index': vhca_id << 16 | UPLINK_PORT, 'reporters': reporters,
        **state})
    return dev


def eswitch_mode(root: str | os.PathLike[str], address: str) -> str | None:
    """The eswitch mode of the port at ``address``; None when it is no
    devlink instance."""
    state = read_state(root, address)
    return None if state is None else str(state['eswitch']['mode'])


def set_representors(tree: SysfsTree, address: str) -> None:
    """Make the representor netdevs under the port at ``address`` those
    of its VFs when its eswitch is in switchdev mode, none otherwise, as
    mlx5_core loads and unloads them (eswitch_offloads.c)."""
    dev = tree.device_dir(address)
    pf_number = int(address.rsplit('.', 1)[1], 16)
    wanted = (len(list(dev.glob('virtfn*')))
              if eswitch_mode(tree.root, address) == 'switchdev' else 0)
    uplinks = [p.name for p in sorted((dev / 'net').glob('*'))
               if not _is_representor(p)]
    prefix = uplinks[0] if uplinks else f'eth{pf_number}'
    names = {f'{prefix}_{n}' for n in range(wanted)}
    for path in list((dev / 'net').glob('*')):
        if _is_representor(path) and path.name not in names:
            tree.remove(f'sys/class/net/{path.name}')
            tree.remove(str(path.relative_to(tree.base)))
    for n in range(wanted):
        name = f'{prefix}_{n}'
        if not (dev / 'net' / name).exists():
            rep = tree.add_net_interface(address, name, operstate='down',
                                         carrier=0)
            (rep / 'phys_port_name').write_text(f'pf{pf_number}vf{n}\n')


def _is_representor(path: pathlib.Path) -> bool:
    name_file = path / 'phys_port_name'
    return name_file.exists() and name_file.read_text().startswith('pf')


def read_log(root: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The commands the emulated devlink of ``root`` ran, oldest first."""
    try:
        text = (pathlib.Path(root) / LOG_NAME).read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line]


def install(directory: str | os.PathLike[str],
            root: str | os.PathLike[str]) -> str:
    """Write ``<directory>/devlink``, the emulator for the tree at
    ``root``, run by this interpreter with this checkout of cyborg on its
    path; returns its path."""
    checkout = pathlib.Path(__file__).resolve().parents[3]
    program = pathlib.Path(directory) / 'devlink'
    program.parent.mkdir(parents=True, exist_ok=True)
    program.write_text(
        '#!/bin/sh\n'
        f'PYTHONPATH={_quote(str(checkout))} exec {_quote(sys.executable)} '
        f'-m cyborg.tests.harness.devlink --root {_quote(str(root))} '
        '"$@"\n')
    program.chmod(0o755)
    return str(program)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


class _Refused(Exception):
    """devlink exits 1 with this on stderr."""


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(',', ':'))


class _Devlink:
    def __init__(self, root: str, as_json: bool) -> None:
        self.root = root
        self.as_json = as_json
        self.out: list[str] = []

    def _state(self, handle: str) -> tuple[str, dict[str, Any]]:
        bus, _, address = handle.partition('/')
        if bus != 'pci' or not address or '/' in address:
            raise _Refused(f'Devlink identification ("bus_name/dev_name") '
                           f'"{handle}" is invalid')
        state = read_state(self.root, address)
        if state is None:
            raise _Refused(_ENODEV)
        return address, state

    def eswitch_show(self, handle: str) -> None:
        if self.as_json:
            # The section is opened before the kernel answers.
            self.out.append(_dumps({'dev': {}}))
        _, state = self._state(handle)
        if not state['eswitch_manager']:
            raise _Refused(_EOPNOTSUPP)
        attributes = state['eswitch']
        if self.as_json:
            self.out[-1] = _dumps({'dev': {handle: attributes}})
        else:
            self.out.append(f'{handle}: ' + ' '.join(
                f'{k} {v}' for k, v in attributes.items()))

    def eswitch_set(self, handle: str, mode: str) -> None:
        if mode not in (*_MODES, 'switchdev_inactive'):
            raise _Refused(f'Unknown eswitch mode "{mode}"')
        address, state = self._state(handle)
        if not state['eswitch_manager'] or mode not in _MODES:
            raise _Refused(_EOPNOTSUPP)
        if state['offloaded_flows'] > 0:
            raise _Refused("Error: mlx5_core: Can't change mode, E-Switch "
                           f'is busy.\n{_EBUSY}')
        if state['eswitch']['mode'] == mode:
            return
        if mode == 'switchdev' and state['active_traps'] > 0:
            raise _Refused("Error: mlx5_core: Can't change mode while "
                           f'devlink traps are active.\n{_EOPNOTSUPP}')
        state['eswitch']['mode'] = mode
        write_state(self.root, address, state)
        set_representors(SysfsTree(self.root), address)

    def health_show(self, handle: str | None) -> None:
        sections: dict[str, list[dict[str, Any]]] = {}
        if handle is None:
            folder = pathlib.Path(self.root) / 'devlink' / 'pci'
            addresses = sorted(p.stem for p in folder.glob('*.json'))
        else:
            addresses = [self._state(handle)[0]]
        for address in addresses:
            state = read_state(self.root, address)
            if state is None:
                continue
            for reporter in state['reporters']:
                key = (f'pci/{address}/{state["port_index"]}'
                       if reporter.get('port') else f'pci/{address}')
                fields = {'reporter': reporter['reporter'],
                          'state': reporter['state'],
                          'error': reporter['error'],
                          'recover': reporter['recover']}
                fields.update((k, reporter[k]) for k in (
                    'grace_period', 'auto_recover', 'auto_dump')
                    if k in reporter)
                sections.setdefault(key, []).append(fields)
        if self.as_json:
            self.out.append(_dumps({'health': sections}))
            return
        for key, reporters in sections.items():
            self.out.append(f'{key}:')
            for fields in reporters:
                rest = ' '.join(f'{k} {str(v).lower()}'
                                for k, v in fields.items()
                                if k not in ('reporter', 'state'))
                self.out.append(f'  reporter {fields["reporter"]}')
                self.out.append(f'    state {fields["state"]} {rest}')


def run(root: str, argv: Sequence[str]) -> tuple[int, str, str]:
    """devlink's exit status, stdout and stderr for ``argv`` (its
    arguments) on the tree at ``root``."""
    args = list(argv)
    as_json = False
    while args and args[0].startswith('-'):
        option = args.pop(0)
        if option in ('-j', '--json'):
            as_json = True
        elif option not in ('-p', '--pretty'):
            return 1, '', 'Unknown option.\n'
    devlink = _Devlink(root, as_json)
    error = None
    try:
        if args[:3] == ['dev', 'eswitch', 'show'] and len(args) == 4:
            devlink.eswitch_show(args[3])
        elif (args[:3] == ['dev', 'eswitch', 'set'] and len(args) == 6
                and args[4] == 'mode'):
            devlink.eswitch_set(args[3], args[5])
        elif args[:2] == ['health', 'show'] and len(args) in (2, 3):
            devlink.health_show(args[2] if len(args) == 3 else None)
        else:
            raise _Refused(f'Object "{args[0] if args else ""}" not found')
    except _Refused as exc:
        error = str(exc)
    with open(pathlib.Path(root) / LOG_NAME, 'a', encoding='utf-8') as log:
        entry: dict[str, Any] = {'argv': list(argv)}
        if error is not None:
            entry['error'] = error
        log.write(json.dumps(entry) + '\n')
    stdout = ''.join(f'{line}\n' for line in devlink.out)
    if error is not None:
        return 1, stdout, f'{error}\n'
    return 0, stdout, ''


def main(argv: Sequence[str] | None = None) -> int:
    """``--root <root>`` then devlink's own arguments."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or args[0] != '--root':
        sys.stderr.write('usage: devlink.py --root <root> [devlink '
                         'arguments]\n')
        return 2
    status, stdout, stderr = run(args[1], args[2:])
    sys.stdout.write(stdout)
    sys.stderr.write(stderr)
    return status


if __name__ == '__main__':
    sys.exit(main())
