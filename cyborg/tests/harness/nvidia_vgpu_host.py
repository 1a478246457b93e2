"""The NVIDIA vGPU manager's sysfs files of an SR-IOV GPU (vGPU software 17
and later), for fake trees and the emulated kernel.

A GPU is described once (``add_gpu``): its types, each with the
framebuffer in GB its name says, and the GPU's framebuffer. Its VFs, made
by the builder or by the emulated kernel on a ``sriov_numvfs`` write, get
the two files NVIDIA's Virtual GPU Software User Guide (vGPU 17.0 and
later, "Creating an NVIDIA vGPU on a Linux with KVM Hypervisor That Uses
a Vendor-Specific VFIO Framework",
https://docs.nvidia.com/vgpu/18.0/grid-vgpu-user-guide/) shows:

* ``nvidia/creatable_vgpu_types``: the header ``ID    : vGPU Name`` and
  one ``<id>  : <name>`` line per type the VF can take now;
* ``nvidia/current_vgpu_type``: the VF's type id, ``0`` for none.

The manager prints the type followed by a newline, and a driver writes
the bare id, so a file without its newline is a write not yet answered.
``follow`` does what the vGPU manager does with a write to
``current_vgpu_type``, and refuses what it refuses by changing nothing
(the emulator cannot fail a ``write()``, see ``sysfs_kernel``): a type on
a VF that has one, and ``0`` on a VF that has none (EPERM), text that is
not a number (EINVAL), and a type the VF does not list now (the guide
names no errno for it; EINVAL here). The guide has
time-sliced vGPUs of one GPU all of one type and sized from the GPU's
framebuffer, so a VF lists a type while no VF of the GPU has another and
the framebuffer has room for one more; a VF with a type lists nothing.
The model of each GPU is kept beside ``sys`` (``nvidia-vgpu/<pf>.json``)
so that the builder and an emulator in another process share it.
"""
import json
import pathlib
from collections.abc import Sequence
from typing import Any

from cyborg.tests.harness.sysfs import SysfsTree
from cyborg.tests.harness.sysfs import vf_addresses

MODEL_DIR = 'nvidia-vgpu'
HEADER = 'ID    : vGPU Name'
CREATABLE = 'nvidia/creatable_vgpu_types'
CURRENT = 'nvidia/current_vgpu_type'
# (type id, name, framebuffer GB) of an H100 SXM5 80GB (device 0x2330) on
# vGPU 17: the C-series (compute) time-sliced types.
H100_TYPES = (('1008', 'NVIDIA H100XM-10C', 10),
              ('1009', 'NVIDIA H100XM-16C', 16),
              ('1010', 'NVIDIA H100XM-20C', 20),
              ('1011', 'NVIDIA H100XM-40C', 40),
              ('1012', 'NVIDIA H100XM-80C', 80))


def _model_path(tree: SysfsTree, pf: str) -> pathlib.Path:
    return tree.path(f'{MODEL_DIR}/{pf}.json')


def model(tree: SysfsTree, pf: str) -> dict[str, Any] | None:
    """The model of the GPU at ``pf``; None for a GPU without one."""
    try:
        return json.loads(_model_path(tree, pf).read_text())
    except FileNotFoundError:
        return None


def add_gpu(tree: SysfsTree, address: str, device: int = 0x2330,
            types: Sequence[tuple[str, str, int]] = H100_TYPES,
            framebuffer_gb: int = 80, totalvfs: int = 16,
            vfs: int = 0) -> pathlib.Path:
    """An SR-IOV vGPU GPU on the ``nvidia`` driver, with ``vfs`` VFs
    enabled (each with its vGPU files); returns its device directory."""
    dev = tree.add_function(address, 0x10de, device, 0x030200,
                            driver='nvidia', subsystem_vendor=0x10de,
                            subsystem_device=0x16c1,
                            sriov_totalvfs=totalvfs)
    (dev / 'sriov_numvfs').write_text('0\n')
    path = _model_path(tree, address)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        'framebuffer_gb': framebuffer_gb,
        'types': [list(t) for t in types], 'vfs': {}}))
    if vfs:
        made = vf_addresses(address, vfs)
        tree.add_vfs(address, made, 0x10de, device, driver='nvidia')
        vfs_added(tree, address, made)
    return dev


def current(tree: SysfsTree, pf: str, n: int) -> str:
    """What ``current_vgpu_type`` of VF ``n`` of the GPU at ``pf`` reads,
    its newline included (the manager's answer has one)."""
    vf = vf_addresses(pf, n + 1)[n]
    return (tree.device_dir(vf) / CURRENT).read_text()


def vfs_added(tree: SysfsTree, pf: str, vfs: Sequence[str]) -> None:
    """Give new VFs of the GPU at ``pf`` their vGPU files, as the vGPU
    manager does when the VFs are enabled."""
    state = model(tree, pf)
    if state is None:
        return
    state['vfs'] = {vf: '0' for vf in vfs}
    _save(tree, pf, state)


def vfs_removed(tree: SysfsTree, pf: str) -> None:
    state = model(tree, pf)
    if state is not None:
        state['vfs'] = {}
        _save(tree, pf, state)


def _save(tree: SysfsTree, pf: str, state: dict[str, Any]) -> None:
    _model_path(tree, pf).write_text(json.dumps(state))
    _write_files(tree, state)


def _creatable(state: dict[str, Any], vf: str) -> list[list[Any]]:
    if state['vfs'].get(vf, '0') != '0':
        return []
    taken = [t for t in state['vfs'].values() if t != '0']
    sizes = {t[0]: t[2] for t in state['types']}
    used = sum(sizes.get(t, 0) for t in taken)
    return [t for t in state['types']
            if set(taken) <= {t[0]}
            and used + t[2] <= state['framebuffer_gb']]


def _write_files(tree: SysfsTree, state: dict[str, Any]) -> None:
    present = {vf: tree.device_dir(vf) for vf in state['vfs']
               if tree.device_dir(vf).is_dir()}
    for vf, dev in present.items():
        (dev / 'nvidia').mkdir(exist_ok=True)
        lines = [HEADER] + [f'{t[0]:<6}: {t[1]}'
                            for t in _creatable(state, vf)]
        (dev / CREATABLE).write_text('\n'.join(lines) + '\n')
    # The types last: they are what a driver reads back, and the lists
    # must have narrowed by then.
    for vf, dev in present.items():
        path = dev / CURRENT
        answer = f'{state["vfs"][vf]}\n'
        if not path.exists() or path.read_text() != answer:
            path.write_text(answer)


def gpus(tree: SysfsTree) -> list[str]:
    """The addresses of the GPUs with a model."""
    directory = tree.path(MODEL_DIR)
    return sorted(p.stem for p in directory.glob('*.json')) if (
        directory.is_dir()) else []


def follow(tree: SysfsTree, pf: str, log: Any) -> None:
    """Act on writes to the ``current_vgpu_type`` of the GPU's VFs;
    ``log(event, device, **details)`` records each, with ``error`` for
    a refusal."""
    state = model(tree, pf)
    if state is None:
        return
    for vf, current in list(state['vfs'].items()):
        path = tree.device_dir(vf) / CURRENT
        try:
            raw = path.read_text()
        except FileNotFoundError:
            continue
        if not raw or raw.endswith('\n'):
            # Empty: a write under way (the writer truncated first); a
            # newline: the manager's own answer, not a write.
            continue
        text = raw.strip()
        error = None
        listed = {t[0] for t in _creatable(state, vf)}
        if not text.isdigit():
            error = 'EINVAL: not a number'
        elif text == '0' or int(text) == 0:
            text = '0'
            if current == '0':
                error = 'EPERM: the VF has no vGPU'
        elif current != '0':
            error = f'EPERM: the VF has vGPU type {current}'
        elif text not in listed:
            error = f'EINVAL: vGPU type {text} is not creatable on the VF'
        if error is not None:
            log('vgpu_type', vf, asked=text, error=error)
            path.write_text(f'{current}\n')
            continue
        log('vgpu_type', vf, type=text)
        state['vfs'][vf] = text
        _save(tree, pf, state)
