"""A driver for any PCI function the operator selects in configuration.

Each selected function is passed through whole. A physical function with
SR-IOV virtual functions enabled is never reported, even when selected:
its host driver serves the VFs (which a spec may select in its place).

A selected function that offers mediated devices (``mdev_supported_types``
on it or on its VFs) may be given an mdev layout: it is then reported as
``mdev_count`` MDEV attach handles of ``mdev_type`` (resource class
``VGPU`` for a spec of type GPU, ``CUSTOM_MDEV`` otherwise, with the
trait ``CUSTOM_MDEV_<TYPE>``), until ``mdev_count`` 0 gives it back whole.
"""
import dataclasses
import json
import re

from oslo_config import cfg

from cyborg.accelerator import pci
from cyborg.accelerator.drivers import mdev_driver
from cyborg.accelerator.drivers import pci_report
from cyborg.accelerator.drivers.base import trait_part
from cyborg.accelerator.drivers.mdev_driver import MdevDriver
from cyborg.accelerator.drivers.pci_driver import Functions
from cyborg.common import device_report
from cyborg.common import exception
from cyborg.common.device_report import DriverDevice

OPTION = '[generic_pci] device_specs'
CUSTOM_RE = re.compile(r'^CUSTOM_[A-Z0-9_]+$')
# Standard resource classes that describe one whole PCI function.
STANDARD_RESOURCE_CLASSES = ('FPGA', 'PGPU', 'PCI_DEVICE', 'SRIOV_NET_VF')
DEFAULT_TYPE = 'PCI'
_DEFAULT_RESOURCE_CLASSES = {'GPU': 'PGPU', 'FPGA': 'FPGA'}
# The resource class of a device's mdevs, by device type; CUSTOM_MDEV for
# the other types.
_MDEV_RESOURCE_CLASSES = {'GPU': 'VGPU'}
_CLASS_PREFIX_RE = re.compile(r'^(?:0x)?((?:[0-9a-f]{2}){1,3})$')
_ADDRESS_GLOB_RE = re.compile(r'^[0-9a-f:.*?\[\]!-]+$')
_SELECTORS = ('vendor_id', 'product_id', 'class', 'address')
_FLAGS = ('physical_function_only', 'virtual_function_only')
_KEYS = (*_SELECTORS, *_FLAGS, 'type', 'resource_class', 'traits')


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    """One operator selection of PCI functions, and how to report them."""

    vendor_id: str | None = None
    product_id: str | None = None
    class_prefix: str | None = None
    address: str | None = None
    physical_function_only: bool = False
    virtual_function_only: bool = False
    type: str = DEFAULT_TYPE
    resource_class: str = 'CUSTOM_PCI'
    traits: tuple[str, ...] = ()

    def matches(self, function: pci.PciFunction) -> bool:
        return ((self.vendor_id is None
                 or function.vendor_id == self.vendor_id)
                and (self.product_id is None
                     or function.device_id == self.product_id)
                and (self.class_prefix is None
                     or function.matches_class(self.class_prefix))
                and (self.address is None
                     or function.matches_address(self.address))
                and not (self.physical_function_only and function.is_vf)
                and not (self.virtual_function_only and not function.is_vf))


def parse_spec(text: str) -> DeviceSpec:
    """The spec a ``device_specs`` value describes; ValueError says what
    is wrong with it."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise ValueError(f'not JSON: {exc}') from None
    if not isinstance(raw, dict):
        raise ValueError('not a JSON object')
    unknown = sorted(set(raw) - set(_KEYS))
    if unknown:
        raise ValueError(f'unknown key(s) {", ".join(unknown)}; known keys: '
                         f'{", ".join(_KEYS)}')
    if not any(raw.get(k) is not None for k in _SELECTORS):
        raise ValueError('it would select every PCI function; give at '
                         f'least one of {", ".join(_SELECTORS)}')

    def text_of(key: str) -> str | None:
        value = raw.get(key)
        if value is not None and not isinstance(value, str):
            raise ValueError(f'{key} must be a string, not {value!r}')
        return None if value is None else value.strip().lower()

    def hex_id(key: str) -> str | None:
        value = text_of(key)
        try:
            return None if value is None else pci.parse_hex_id(value, 4)
        except ValueError as exc:
            raise ValueError(f'{key}: {exc}') from None

    class_prefix = text_of('class')
    if class_prefix is not None:
        match = _CLASS_PREFIX_RE.match(class_prefix)
        if not match:
            raise ValueError(
                f'class {raw["class"]!r} is not a hex class code prefix '
                '(2, 4 or 6 hex digits, such as 0x03, 0x0302 or 0x030200)')
        class_prefix = '0x' + match.group(1)
    address = text_of('address')
    if address is not None and not _ADDRESS_GLOB_RE.match(address):
        raise ValueError(f'address {raw["address"]!r} is not a PCI address '
                         'pattern such as 0000:3b:00.* or 0000:3b:0[0-3].*')
    flags = {}
    for key in _FLAGS:
        value = raw.get(key, False)
        if not isinstance(value, bool):
            raise ValueError(f'{key} must be true or false, not {value!r}')
        flags[key] = value
    if all(flags.values()):
        raise ValueError(f'{" and ".join(_FLAGS)} exclude each other')

    device_type = raw.get('type', DEFAULT_TYPE)
    if device_type not in device_report.DEVICE_TYPES:
        raise ValueError(f'type {device_type!r} is not one of '
                         f'{", ".join(device_report.DEVICE_TYPES)}')
    resource_class = raw.get(
        'resource_class',
        _DEFAULT_RESOURCE_CLASSES.get(device_type, f'CUSTOM_{device_type}'))
    if not (isinstance(resource_class, str)
            and (CUSTOM_RE.match(resource_class)
                 or resource_class in STANDARD_RESOURCE_CLASSES)):
        raise ValueError(
            f'resource_class {resource_class!r} is neither CUSTOM_<NAME> '
            '(A-Z, 0-9, _) nor one of the standard classes '
            f'{", ".join(STANDARD_RESOURCE_CLASSES)}')
    traits = raw.get('traits', [])
    if not isinstance(traits, list):
        raise ValueError(f'traits must be a list, not {traits!r}')
    for trait in traits:
        if (not isinstance(trait, str) or not CUSTOM_RE.match(trait)
                or len(trait) > 255):
            raise ValueError(f'trait {trait!r} is not CUSTOM_<NAME> '
                             '(A-Z, 0-9, _)')
    return DeviceSpec(
        vendor_id=hex_id('vendor_id'), product_id=hex_id('product_id'),
        class_prefix=class_prefix, address=address, type=device_type,
        resource_class=resource_class, traits=tuple(traits), **flags)


def parse_specs(values: list[str]) -> list[DeviceSpec]:
    """Every spec of ``[generic_pci] device_specs``; Invalid naming the
    option, the entry and the problem when one is wrong."""
    specs = []
    for number, text in enumerate(values, 1):
        try:
            specs.append(parse_spec(text))
        except ValueError as exc:
            raise exception.Invalid(
                reason=f'{OPTION} entry {number} ({text}): {exc}') from None
    return specs


def product_trait(function: pci.PciFunction) -> str:
    """``CUSTOM_PCI_<VENDOR>_<PRODUCT>``, e.g. ``CUSTOM_PCI_1AF4_1041``."""
    return (f'CUSTOM_PCI_{trait_part(function.vendor_id[2:])}_'
            f'{trait_part(function.device_id[2:])}')


class GenericPciDriver(MdevDriver):
    """Reports each PCI function matching a ``[generic_pci] device_specs``
    entry as one device with one single-accelerator deployable, whose
    attach handle passes the whole function through; or, under an mdev
    layout, as that many mdevs of one type."""

    driver_name = 'generic_pci'
    conf_group = 'generic_pci'
    noun = 'matching function'
    parent_noun = f'function selected by {OPTION} (or VF of one)'

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        super().__init__(conf)
        self.specs = parse_specs(conf.generic_pci.device_specs)
        if not self.specs:
            self.log.warning('The generic_pci driver is enabled but %s is '
                             'empty; it reports no device.', OPTION)

    def matches(self, function: pci.PciFunction) -> bool:
        return any(spec.matches(function) for spec in self.specs)

    def mdev_parent(self, function: pci.PciFunction) -> bool:
        if self.matches(function):
            return True
        pf = self.bus.get(function.physfn) if function.physfn else None
        return pf is not None and self.matches(pf)

    def device(self, function: pci.PciFunction, functions: Functions
               ) -> DriverDevice | None:
        # The first spec selecting the function says how to report it.
        spec = next(s for s in self.specs if s.matches(function))
        traits = ['OWNER_CYBORG', product_trait(function), *spec.traits]
        layout = self.mdev_layout(function.address)
        if layout is not None:
            return self._mdevs(spec, function, functions, traits, *layout)
        return self.whole_device(
            spec.type, function, spec.resource_class, traits,
            remedy='set its sriov_numvfs to 0 to hand it out, or select '
                   f'its VFs in {OPTION}')

    def _mdevs(self, spec: DeviceSpec, function: pci.PciFunction,
               functions: Functions, traits: list[str], type_id: str,
               count: int) -> DriverDevice | None:
        """``function`` as ``count`` mdevs of ``type_id``, created on it
        or on its VFs; None, with a warning, when neither offers the type
        any longer."""
        vfs = [functions[vf] for vf in function.virtfns if vf in functions]
        parents = mdev_driver.parents(function, vfs, type_id)
        if not parents:
            self.warn('PCI function %s was set to mdev type %s but no '
                      'longer offers it (it offers: %s); it is not reported '
                      'until it does, or until its layout changes.',
                      function.address, type_id,
                      ', '.join(mdev_driver.type_ids([function, *vfs]))
                      or 'none')
            return None
        handles = self.mdev_handles(parents, type_id, count)
        deployable = self.deployable(
            function, _MDEV_RESOURCE_CLASSES.get(spec.type, 'CUSTOM_MDEV'),
            [*traits, mdev_driver.mdev_trait(type_id)], handles)
        return pci_report.device(spec.type, function, [deployable],
                                 mdev_type=type_id)
