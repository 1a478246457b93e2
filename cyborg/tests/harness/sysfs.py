"""Fake sysfs trees, laid out as the kernel lays them out, for driver tests.

``SysfsTree(tmp_path)`` builds ``<tmp_path>/sys``: each PCI function is a
real directory under ``sys/devices/pci<domain>:<bus>/`` with a
``sys/bus/pci/devices/<address>`` symlink to it; ``driver``,
``iommu_group``, ``physfn``, ``virtfn<N>`` and class entries are relative
symlinks as in the real sysfs, and ids are written ``0x10de\\n``. Point
``PciBus(tree.root)`` or ``[agent] sysfs_root`` at ``tree.root``.

Values are written as given when they are strings, so a test can write a
malformed one (``vendor='zzzz'``); integers are formatted as the kernel
formats them.
"""
import os
import pathlib
import re
import shutil
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Literal

Id = str | int

# The error names the kernel lists in aer_dev_correctable and in
# aer_dev_nonfatal / aer_dev_fatal (drivers/pci/pcie/aer.c), each file
# ending with its total line.
AER_CORRECTABLE = ('Receiver Error', 'Bad TLP', 'Bad DLLP',
                   'RELAY_NUM Rollover', 'Replay Timer Timeout',
                   'Advisory Non-Fatal', 'Corrected Internal Error',
                   'Header Log Overflow')
AER_UNCORRECTABLE = ('Undefined', 'Data Link Protocol',
                     'Surprise Down Error', 'Poisoned TLP',
                     'Flow Control Protocol', 'Completion Timeout',
                     'Completer Abort', 'Unexpected Completion',
                     'Receiver Overflow', 'Malformed TLP', 'ECRC',
                     'Unsupported Request', 'ACS Violation',
                     'Uncorrectable Internal Error', 'MC Blocked TLP',
                     'AtomicOp Egress Blocked', 'TLP Prefix Blocked Error')
NET_STATISTICS = ('rx_bytes', 'tx_bytes', 'rx_errors', 'tx_errors',
                  'rx_dropped', 'tx_dropped', 'rx_packets', 'tx_packets')


def _hex(value: Id, digits: int) -> str:
    return f'0x{value:0{digits}x}' if isinstance(value, int) else value


def _link_name(path: pathlib.Path) -> str | None:
    return os.path.basename(os.readlink(path)) if path.is_symlink() else None


# Where VFs go when a PF has no sriov_offset / sriov_stride file: routing
# id + 128 (device 0x10 of the PF's bus), one function apart.
DEFAULT_VF_OFFSET = 128
DEFAULT_VF_STRIDE = 1
_ADDRESS_RE = re.compile(r'^([0-9a-f]{4,8}):([0-9a-f]{2}):([0-1][0-9a-f])'
                         r'\.([0-7])$')


def vf_addresses(pf: str, count: int, offset: int = DEFAULT_VF_OFFSET,
                 stride: int = DEFAULT_VF_STRIDE) -> list[str]:
    """The addresses of the first ``count`` VFs of PF ``pf``: routing id
    + ``offset`` + n * ``stride`` (the SR-IOV capability's First VF Offset
    and VF Stride, as the kernel's pci_iov_virtfn_bus/devfn place them)."""
    match = _ADDRESS_RE.match(pf)
    assert match is not None, pf
    domain, bus, device, function = match.groups()
    rid = (int(bus, 16) << 8) | (int(device, 16) << 3) | int(function)
    found = []
    for n in range(count):
        vf_rid = rid + offset + n * stride
        found.append(f'{domain}:{vf_rid >> 8:02x}:'
                     f'{(vf_rid >> 3) & 0x1f:02x}.{vf_rid & 7:x}')
    return found


def pci_parts(address: str) -> dict[str, str]:
    """A PCI address as a control path or attach info names it:
    ``domain``, ``bus``, ``device`` and ``function``."""
    domain, bus, rest = address.split(':')
    device, function = rest.split('.')
    return {'domain': domain, 'bus': bus, 'device': device,
            'function': function}


class SysfsTree:
    """A sysfs tree under ``base`` (a test's ``tmp_path``)."""

    def __init__(self, base: str | os.PathLike[str]) -> None:
        self.base = pathlib.Path(base)
        (self.base / 'sys' / 'bus' / 'pci' / 'devices').mkdir(
            parents=True, exist_ok=True)
        (self.base / 'sys' / 'class').mkdir(exist_ok=True)
        self._next_group = 0

    @property
    def root(self) -> str:
        """The directory to use as sysfs root (it contains ``sys``)."""
        return str(self.base)

    def path(self, relpath: str) -> pathlib.Path:
        """``relpath`` (``sys/class/fpga`` or ``/sys/class/fpga``) in the
        tree."""
        return self.base / relpath.lstrip('/')

    def device_dir(self, address: str) -> pathlib.Path:
        """The real directory of the function at ``address``."""
        return self.path(f'sys/devices/pci{address[:-8]}:00/{address}')

    def write(self, relpath: str, content: str | int) -> pathlib.Path:
        """Write ``content`` (plus a newline) to ``relpath``, creating the
        directories above it; symlinks on the way are followed."""
        path = self.path(relpath)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f'{content}\n')
        return path

    def link(self, relpath: str, target_relpath: str) -> pathlib.Path:
        """Make ``relpath`` a relative symlink to ``target_relpath`` (which
        need not exist), replacing what was there."""
        path = self.path(relpath)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink() or path.is_file():
            path.unlink()
        target = self.path(target_relpath)
        os.symlink(os.path.relpath(target, path.parent), path)
        return path

    def remove(self, relpath: str) -> None:
        """Remove a file, symlink or directory tree."""
        path = self.path(relpath)
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.exists():
            shutil.rmtree(path)

    def add_function(
            self, address: str, vendor: Id, device: Id, class_code: Id,
            driver: str | None = None, numa_node: int | None = 0,
            iommu_group: int | Literal['auto'] | None = 'auto',
            subsystem_vendor: Id | None = None,
            subsystem_device: Id | None = None,
            sriov_totalvfs: int | None = None) -> pathlib.Path:
        """Add a PCI function; returns its device directory.

        ``iommu_group`` 'auto' puts it in a new group of its own; None
        leaves it out of any (no IOMMU). ``numa_node`` None writes -1, as
        the kernel does on hosts without NUMA. ``sriov_totalvfs`` makes it
        an SR-IOV PF with no VFs enabled yet.
        """
        address = address.lower()
        bus_link = f'sys/bus/pci/devices/{address}'
        if self.path(bus_link).is_symlink():
            raise ValueError(f'{address} is already in the tree')
        dev = self.device_dir(address)
        dev.mkdir(parents=True)
        rel = str(dev.relative_to(self.base))
        self.link(bus_link, rel)
        self.link(f'{rel}/subsystem', 'sys/bus/pci')
        self.write(f'{rel}/vendor', _hex(vendor, 4))
        self.write(f'{rel}/device', _hex(device, 4))
        self.write(f'{rel}/class', _hex(class_code, 6))
        if subsystem_vendor is not None:
            self.write(f'{rel}/subsystem_vendor', _hex(subsystem_vendor, 4))
        if subsystem_device is not None:
            self.write(f'{rel}/subsystem_device', _hex(subsystem_device, 4))
        self.write(f'{rel}/numa_node', -1 if numa_node is None else numa_node)
        if iommu_group == 'auto':
            iommu_group = self._new_group()
        if iommu_group is not None:
            group = f'sys/kernel/iommu_groups/{iommu_group}'
            self.path(f'{group}/devices').mkdir(parents=True, exist_ok=True)
            self.link(f'{rel}/iommu_group', group)
            self.link(f'{group}/devices/{address}', rel)
        if sriov_totalvfs is not None:
            self.write(f'{rel}/sriov_totalvfs', sriov_totalvfs)
            self.write(f'{rel}/sriov_numvfs', 0)
        if driver is not None:
            self.bind(address, driver)
        self._write_uevent(address)
        return dev

    def _new_group(self) -> int:
        groups = self.path('sys/kernel/iommu_groups')
        used = ({int(g.name) for g in groups.iterdir() if g.name.isdigit()}
                if groups.exists() else set())
        while self._next_group in used:
            self._next_group += 1
        return self._next_group

    def _write_uevent(self, address: str) -> None:
        dev = self.device_dir(address)

        def raw(name: str) -> str:
            path = dev / name
            if not path.exists():
                return ''
            return path.read_text().strip().lower().removeprefix('0x')

        lines = []
        driver = _link_name(dev / 'driver')
        if driver is not None:
            lines.append(f'DRIVER={driver}')
        lines += [f'PCI_CLASS={raw("class").lstrip("0").upper() or "0"}',
                  f'PCI_ID={raw("vendor").upper()}:{raw("device").upper()}']
        if (dev / 'subsystem_vendor').exists():
            lines.append(f'PCI_SUBSYS_ID={raw("subsystem_vendor").upper()}:'
                         f'{raw("subsystem_device").upper()}')
        lines.append(f'PCI_SLOT_NAME={address}')
        (dev / 'uevent').write_text(''.join(f'{line}\n' for line in lines))

    def bind(self, address: str, driver: str | None) -> None:
        """Bind the function to kernel ``driver`` (None: unbind it)."""
        dev = self.device_dir(address)
        rel = str(dev.relative_to(self.base))
        old = _link_name(dev / 'driver')
        if old is not None:
            self.remove(f'sys/bus/pci/drivers/{old}/{address}')
            (dev / 'driver').unlink()
        if driver is not None:
            self.path(f'sys/bus/pci/drivers/{driver}').mkdir(
                parents=True, exist_ok=True)
            self.link(f'{rel}/driver', f'sys/bus/pci/drivers/{driver}')
            self.link(f'sys/bus/pci/drivers/{driver}/{address}', rel)
        self._write_uevent(address)

    def add_vfs(self, pf_address: str, vf_addresses: Iterable[str],
                vendor: Id, device: Id, class_code: Id | None = None,
                driver: str | None = None, numa_node: int | None = 0,
                ) -> list[pathlib.Path]:
        """Enable SR-IOV VFs on PF ``pf_address``: each VF gets a device
        directory (class defaults to the PF's), a ``physfn`` link, and the
        PF a ``virtfn<N>`` link numbered after its existing VFs; the PF's
        ``sriov_numvfs`` counts them (and ``sriov_totalvfs`` at least)."""
        pf = self.device_dir(pf_address.lower())
        pf_rel = str(pf.relative_to(self.base))
        if class_code is None:
            class_code = (pf / 'class').read_text().strip()
        index = len(list(pf.glob('virtfn*')))
        made = []
        for vf_address in vf_addresses:
            vf = self.add_function(vf_address, vendor, device, class_code,
                                   driver=driver, numa_node=numa_node)
            vf_rel = str(vf.relative_to(self.base))
            self.link(f'{vf_rel}/physfn', pf_rel)
            self.link(f'{pf_rel}/virtfn{index}', vf_rel)
            index += 1
            made.append(vf)
        total = pf / 'sriov_totalvfs'
        if not total.exists() or int(total.read_text()) < index:
            self.write(f'{pf_rel}/sriov_totalvfs', index)
        self.write(f'{pf_rel}/sriov_numvfs', index)
        return made

    def add_t4(self, address: str,
               types: Iterable[tuple[str, str, int]]) -> pathlib.Path:
        """An NVIDIA T4 (0x10de:0x1eb8) on the vGPU host driver, offering
        ``types`` as (type, name, instances), each with the
        ``max_instance`` NVIDIA's description names. Its directory."""
        device = self.add_function(address, 0x10de, 0x1eb8, 0x030200,
                                   driver='nvidia')
        for type_id, name, instances in types:
            type_dir = self.add_mdev_type(address, type_id, name, instances)
            (type_dir / 'description').write_text(
                f'num_heads=1, max_instance={instances}')
        return device

    def add_mdev_type(self, address: str, type_id: str, name: str | None,
                      available_instances: int | str,
                      device_api: str | None = 'vfio-pci',
                      devices: Iterable[str] = ()) -> pathlib.Path:
        """Offer mdev type ``type_id`` on the function at ``address``, with
        existing mdevs ``devices`` (uuids); the function is listed under
        ``/sys/class/mdev_bus``. Returns the type's directory."""
        address = address.lower()
        dev = self.device_dir(address)
        rel = str(dev.relative_to(self.base))
        type_rel = f'{rel}/mdev_supported_types/{type_id}'
        self.path(f'{type_rel}/devices').mkdir(parents=True)
        if name is not None:
            self.write(f'{type_rel}/name', name)
        self.write(f'{type_rel}/available_instances', available_instances)
        if device_api is not None:
            self.write(f'{type_rel}/device_api', device_api)
        self.path(f'{type_rel}/create').touch()
        for uuid in devices:
            self.path(f'{rel}/{uuid}').mkdir()
            self.link(f'{rel}/{uuid}/mdev_type', type_rel)
            self.path(f'{rel}/{uuid}/remove').touch()
            self.link(f'{type_rel}/devices/{uuid}', f'{rel}/{uuid}')
        mdev_bus = f'sys/class/mdev_bus/{address}'
        if not self.path(mdev_bus).is_symlink():
            self.link(mdev_bus, rel)
        return self.path(type_rel)

    def add_class_entry(self, class_name: str, entry: str,
                        files: Mapping[str, str | int] | None = None,
                        device_link: str | None = None) -> pathlib.Path:
        """Add ``/sys/class/<class_name>/<entry>`` (``fpga_region``,
        ``fpga``, ``net`` ...) holding ``files`` (relative paths, such as
        ``pr/interface_id``, to contents).

        With ``device_link`` (a PCI address) the entry lives under that
        function's directory and has a ``device`` link to it, as class
        devices of a PCI device do; otherwise under
        ``/sys/devices/virtual``. Returns the entry's real directory.
        """
        if device_link is not None:
            parent = self.device_dir(device_link.lower())
        else:
            parent = self.path('sys/devices/virtual')
        real = parent / class_name / entry
        real.mkdir(parents=True)
        rel = str(real.relative_to(self.base))
        self.link(f'sys/class/{class_name}/{entry}', rel)
        if device_link is not None:
            self.link(f'{rel}/device', str(parent.relative_to(self.base)))
        for name, content in (files or {}).items():
            self.write(f'{rel}/{name}', content)
        return real

    # Health files

    def _rel(self, address: str) -> str:
        return str(self.device_dir(address.lower()).relative_to(self.base))

    def add_aer(self, address: str, correctable: int = 0,
                nonfatal: int = 0, fatal: int = 0) -> None:
        """Write the function's AER statistics as the kernel does: one
        line per error bit, the count on the first one (a Receiver Error,
        a Completion Timeout, a Surprise Down), then the total line."""
        rel = self._rel(address)
        for filename, names, count, total in (
                ('aer_dev_correctable', AER_CORRECTABLE, correctable,
                 'TOTAL_ERR_COR'),
                ('aer_dev_nonfatal', AER_UNCORRECTABLE, nonfatal,
                 'TOTAL_ERR_NONFATAL'),
                ('aer_dev_fatal', AER_UNCORRECTABLE, fatal,
                 'TOTAL_ERR_FATAL')):
            bit = {'aer_dev_nonfatal': 'Completion Timeout',
                   'aer_dev_fatal': 'Surprise Down Error'}.get(
                       filename, names[0])
            lines = [f'{n} {count if n == bit else 0}' for n in names]
            lines.append(f'{total} {count}')
            self.write(f'{rel}/{filename}', '\n'.join(lines))

    def set_link(self, address: str, speed: str = '16.0 GT/s PCIe',
                 width: int = 16, max_speed: str | None = None,
                 max_width: int | None = None) -> None:
        """Write the function's link files; the maximum defaults to the
        current (a healthy link)."""
        rel = self._rel(address)
        self.write(f'{rel}/current_link_speed', speed)
        self.write(f'{rel}/max_link_speed', max_speed or speed)
        self.write(f'{rel}/current_link_width', width)
        self.write(f'{rel}/max_link_width',
                   width if max_width is None else max_width)

    def add_hwmon(self, parent_rel: str, name: str,
                  temperatures: Iterable[int] = (),
                  power_average: int | None = None,
                  power_input: int | None = None) -> pathlib.Path:
        """Add a hwmon device under the device directory ``parent_rel``
        (a function's, an FME's): ``hwmon/hwmon<N>`` with its ``name``,
        ``temp<M>_input`` in millidegrees, ``power1_average`` /
        ``power1_input`` in microwatts, and its
        ``/sys/class/hwmon/hwmon<N>`` link. Returns its directory."""
        hwmon_class = self.path('sys/class/hwmon')
        hwmon_class.mkdir(parents=True, exist_ok=True)
        number = len(list(hwmon_class.iterdir()))
        rel = f'{parent_rel.lstrip("/")}/hwmon/hwmon{number}'
        self.write(f'{rel}/name', name)
        self.link(f'{rel}/device', parent_rel.lstrip('/'))
        for n, value in enumerate(temperatures, start=1):
            self.write(f'{rel}/temp{n}_input', value)
        if power_average is not None:
            self.write(f'{rel}/power1_average', power_average)
        if power_input is not None:
            self.write(f'{rel}/power1_input', power_input)
        self.link(f'sys/class/hwmon/hwmon{number}', rel)
        return self.path(rel)

    def add_function_hwmon(self, address: str, name: str,
                           temperatures: Iterable[int] = (),
                           power_average: int | None = None,
                           power_input: int | None = None) -> pathlib.Path:
        """A hwmon device of the PCI function at ``address``."""
        return self.add_hwmon(self._rel(address), name, temperatures,
                              power_average, power_input)

    def add_net_interface(self, address: str, name: str,
                          operstate: str = 'up', carrier: int | None = 1,
                          statistics: Mapping[str, int] | None = None
                          ) -> pathlib.Path:
        """Add network interface ``name`` of the function at ``address``
        (``net/<name>`` and its ``/sys/class/net`` link) with its
        ``operstate``, ``carrier`` (None: unreadable, as while the
        interface is administratively down) and ``statistics/*``."""
        files: dict[str, str | int] = {
            'address': '3c:fd:fe:00:00:01', 'operstate': operstate,
            'flags': '0x1003' if operstate != 'down' else '0x1002'}
        if carrier is not None:
            files['carrier'] = carrier
        values = dict.fromkeys(NET_STATISTICS, 0)
        values.update(statistics or {})
        for stat, value in values.items():
            files[f'statistics/{stat}'] = value
        return self.add_class_entry('net', name, files, device_link=address)

    def set_qat_state(self, address: str, state: str,
                      services: str = 'sym;asym') -> None:
        """Write a QAT 4xxx endpoint's ``qat/state`` and
        ``qat/cfg_services``."""
        rel = self._rel(address)
        self.write(f'{rel}/qat/state', state)
        self.write(f'{rel}/qat/cfg_services', services)

    def add_qat_telemetry(self, address: str, device: str,
                          counters: Mapping[str, int], control: int = 1
                          ) -> pathlib.Path:
        """Lay out ``/sys/kernel/debug/qat_<device>_<address>/telemetry``
        with ``control`` and ``device_data``: ``<counter> <current>``
        lines, or with control 2-4 ``<counter> <current> <min> <max>
        <avg>`` (here all equal). Returns the telemetry directory."""
        rel = f'sys/kernel/debug/qat_{device}_{address.lower()}/telemetry'
        self.write(f'{rel}/control', control)
        lines = [f'{name} {value}' if control < 2
                 else f'{name} {value} {value} {value} {value}'
                 for name, value in counters.items()]
        self.write(f'{rel}/device_data', '\n'.join(lines))
        return self.path(rel)

    def add_fme_errors(self, fme_rel: str, **registers: int) -> None:
        """Write an FPGA management engine's ``errors/*`` registers as
        dfl-fme-error.c prints them (``0x%llx``); registers not given are
        0."""
        values = dict.fromkeys(
            ('pcie0_errors', 'pcie1_errors', 'nonfatal_errors',
             'catfatal_errors', 'inject_errors', 'fme_errors',
             'first_error', 'next_error'), 0)
        values.update(registers)
        for name, value in values.items():
            self.write(f'{fme_rel.lstrip("/")}/errors/{name}', f'{value:#x}')

    # GPUs of the SR-IOV GPU drivers

    def add_amd_instinct(
            self, address: str, device: int = 0x74a1,
            driver: str | None = 'amdgpu', sriov_totalvfs: int = 8,
            vfs: Iterable[str] = (), vf_device: int = 0x74b5,
            vf_driver: str | None = None,
            ras: Mapping[str, tuple[int, ...] | str] | None = None,
            temperatures: tuple[int, int, int] = (38000, 45000, 40000),
            power_average: int = 150_000_000) -> pathlib.Path:
        """An AMD Instinct GPU (the MI300X, 0x1002:0x74a1, by default) with
        its SR-IOV capability (``sriov_totalvfs``; 8, the most VFs GIM
        9.2 enables on an MI300X per its release notes) and ``vfs`` enabled
        (``vf_device`` 0x74b5 is the MI300X VF in GIM's
        amdgv_marketing_name.c; on a GIM host amdgpu is blacklisted, so
        they bind to ``vf_driver``, none by default). Returns its
        directory.

        The class is "Display controller" (0x038000): amdgpu's pciidlist
        (amdgpu_drv.c) binds the GPUs it does not list by id, the MI300
        among them, through the display classes. While ``driver`` is
        amdgpu the function has amdgpu's sysfs files:

        * ``ras/features`` ("feature mask: 0x%x", amdgpu_ras.c
          amdgpu_ras_sysfs_features_read) and one ``ras/<block>_err_count``
          per block of ``ras`` (default umc, sdma, gfx, mmhub with no
          errors): ``(ue, ce)`` written "ue: %lu\\nce: %lu" as
          amdgpu_ras_sysfs_read writes it, ``(ue, ce, de)`` with the
          "de: %lu" line of the ACA-based GPUs (amdgpu_ras_aca_sysfs_read),
          or a string written as it is ("Query currently inaccessible"
          during a reset);
        * a hwmon device named amdgpu with ``temp1..3_input`` in
          millidegrees labelled edge, junction and mem and
          ``power1_average`` in microwatts (amdgpu_pm.c, DOC: hwmon;
          Documentation/gpu/amdgpu/thermal.rst);
        * ``gpu_busy_percent`` (amdgpu_pm.c, DOC: gpu_busy_percent) and
          ``mem_info_vram_total`` / ``mem_info_vram_used`` in bytes
          (amdgpu_vram_mgr.c, DOC: mem_info_vram_total).

        Under GIM (``driver='gim'``) none of them exist: GIM keeps its own.
        """
        dev = self.add_function(address, 0x1002, device, 0x038000,
                                driver=driver, sriov_totalvfs=sriov_totalvfs)
        rel = self._rel(address)
        if driver == 'amdgpu':
            blocks = (dict.fromkeys(('umc', 'sdma', 'gfx', 'mmhub'), (0, 0))
                      if ras is None else ras)
            self.write(f'{rel}/ras/features', 'feature mask: 0x3fbf')
            for block, counts in blocks.items():
                if isinstance(counts, str):
                    text = counts
                else:
                    kinds = ('ue', 'ce', 'de')[:len(counts)]
                    text = '\n'.join(f'{kind}: {n}' for kind, n in
                                     zip(kinds, counts, strict=True))
                self.write(f'{rel}/ras/{block}_err_count', text)
            hwmon = self.add_function_hwmon(address, 'amdgpu', temperatures,
                                            power_average=power_average)
            for n, label in enumerate(('edge', 'junction', 'mem'), start=1):
                (hwmon / f'temp{n}_label').write_text(f'{label}\n')
            self.write(f'{rel}/gpu_busy_percent', 0)
            self.write(f'{rel}/mem_info_vram_total', 205822885888)
            self.write(f'{rel}/mem_info_vram_used', 27815936)
        (dev / 'sriov_vf_device').write_text(f'{vf_device:04x}\n')
        vfs = list(vfs)
        if vfs:
            self.add_vfs(address, vfs, 0x1002, vf_device, driver=vf_driver)
        return dev

    def add_intel_gpu(
            self, address: str, device: int = 0x56c0,
            driver: str | None = 'xe', sriov_totalvfs: int | None = 8,
            vfs: Iterable[str] = (), class_code: int = 0x038000,
            hwmon: bool = True, energy: int = 1_000_000,
            survivability: bool = False) -> pathlib.Path:
        """An Intel data-center GPU (a Data Center GPU Flex, ATS-M150
        0x8086:0x56c0 of include/drm/intel/pciids.h, by default; its class
        a display controller, 0x038000 — a Battlemage card is a VGA
        controller, 0x030000 — as xe's INTEL_VGA_DEVICE matches display
        classes) with ``sriov_totalvfs`` (as xe leaves it: the lower of the
        hardware's and its max_vfs parameter, xe_sriov_pf.c; None: no
        SR-IOV capability) and ``vfs`` enabled, bound to ``driver``
        as the PF is (xe runs them in VF mode, xe_sriov.c). A VF has the
        PF's device id (``sriov_vf_device``): xe's pciidlist, which binds
        them, lists only these ids. Returns its directory.

        With ``hwmon`` the function has xe's hwmon device
        (Documentation/ABI/testing/sysfs-driver-intel-xe-hwmon):
        ``temp2_input`` (package) and ``temp3_input`` (VRAM) in
        millidegrees, ``energy1_input`` (the card's, microjoules),
        ``power1_max`` and ``power1_rated_max`` (microwatts, limits, not
        readings). ``survivability`` adds xe's ``survivability_mode`` file
        (xe_survivability_mode.c) as of a GPU whose firmware needs
        flashing.
        """
        dev = self.add_function(address, 0x8086, device, class_code,
                                driver=driver, sriov_totalvfs=sriov_totalvfs)
        rel = self._rel(address)
        if sriov_totalvfs is not None:
            (dev / 'sriov_vf_device').write_text(f'{device:04x}\n')
        if hwmon:
            directory = self.add_function_hwmon(address, driver or 'xe',
                                                (0, 52000, 48000))
            # temp1 is not one of xe's channels.
            (directory / 'temp1_input').unlink()
            self.write(f'{directory.relative_to(self.base)}/energy1_input',
                       energy)
            for name in ('power1_max', 'power1_rated_max'):
                self.write(f'{directory.relative_to(self.base)}/{name}',
                           120_000_000)
        if survivability:
            self.write(f'{rel}/survivability_mode',
                       'Survivability mode type: Runtime')
        vfs = list(vfs)
        if vfs:
            self.add_vfs(address, vfs, 0x8086, device, driver=driver)
        return dev

    def remove_function(self, address: str) -> None:
        """Remove the function's directory and the bus, driver, IOMMU
        group and mdev_bus links to it. Links from other functions
        (``physfn``, ``virtfn<N>``) are left dangling, as after a hot
        unplug."""
        address = address.lower()
        dev = self.device_dir(address)
        if (dev / 'driver').is_symlink():
            self.bind(address, None)
        group = _link_name(dev / 'iommu_group')
        if group is not None:
            self.remove(f'sys/kernel/iommu_groups/{group}/devices/{address}')
        for entry in self.path('sys/class').glob('*/*'):
            if entry.is_symlink() and entry.resolve().is_relative_to(dev):
                entry.unlink()
        self.remove(f'sys/bus/pci/devices/{address}')
        shutil.rmtree(dev)
