"""Health readings of one PCI function from sysfs: AER counters, link
state and hwmon sensors.

A reading lists the function's directory once and opens only the files
that listing shows, so that a function without AER or hwmon costs one
``listdir`` and the four link files (a health pass reads every device of
a host every ``[agent] health_interval`` seconds). Nothing here writes.

A file that is listed but has gone by the time it is opened means the
function is going away: it reads as absent. Any other failure to read
(``EIO`` from a device that stopped answering, ``EACCES``) and a value
the kernel would not write raise, naming the file: the caller cannot
tell the device's health, which the agent reports as ``unknown``.

Kernel formats (Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats,
drivers/pci/pci-sysfs.c, Documentation/hwmon/sysfs-interface.rst):

* ``aer_dev_correctable``, ``aer_dev_nonfatal``, ``aer_dev_fatal``: one
  ``<error name> <count>`` line per error bit, then ``TOTAL_ERR_COR
  <n>`` (``TOTAL_ERR_NONFATAL``, ``TOTAL_ERR_FATAL``): the number of
  error messages, which is what is counted here (one message may carry
  several bits, so the lines need not add up to it);
* ``current_link_speed`` / ``max_link_speed``: ``8.0 GT/s PCIe`` (before
  Linux 5.2: ``8 GT/s``; ``Unknown`` when the link is not trained);
  ``current_link_width`` / ``max_link_width``: a lane count;
* ``hwmon/hwmon<N>/temp<M>_input`` in millidegrees Celsius,
  ``power<M>_average`` and ``power<M>_input`` in microwatts.
"""
import dataclasses
import errno
import os
import re

# (Usage counter and attribute name, sysfs file, total line's name).
AER_FILES = (('correctable', 'aer_dev_correctable', 'TOTAL_ERR_COR'),
             ('nonfatal', 'aer_dev_nonfatal', 'TOTAL_ERR_NONFATAL'),
             ('fatal', 'aer_dev_fatal', 'TOTAL_ERR_FATAL'))
LINK_FILES = ('current_link_speed', 'max_link_speed', 'current_link_width',
              'max_link_width')
_SPEED_RE = re.compile(r'^(\d+(?:\.\d+)?) GT/s\b')
_TEMP_RE = re.compile(r'^temp\d+_input$')
_POWER_RE = re.compile(r'^power(\d+)_(average|input)$')


@dataclasses.dataclass(frozen=True)
class Aer:
    """The function's AER error messages since its driver bound."""

    correctable: int = 0
    nonfatal: int = 0
    fatal: int = 0


@dataclasses.dataclass(frozen=True)
class Link:
    """The function's PCIe link; None where sysfs says nothing usable."""

    #: GT/s per lane, e.g. 8.0.
    speed: float | None
    max_speed: float | None
    width: int | None
    max_width: int | None

    def degraded(self, compare_speed: bool = True) -> str | None:
        """Why the link runs below what the function can do, or None.

        ``compare_speed`` False looks at the width only, for devices
        that lower their link speed when idle to save power.
        """
        problems = []
        if (compare_speed and self.speed is not None
                and self.max_speed is not None
                and self.speed < self.max_speed):
            problems.append(f'speed {self.speed:g} GT/s of '
                            f'{self.max_speed:g} GT/s')
        if (self.width is not None and self.max_width is not None
                and self.width < self.max_width):
            problems.append(f'width x{self.width} of x{self.max_width}')
        if not problems:
            return None
        return 'PCIe link degraded: ' + ', '.join(problems)


@dataclasses.dataclass(frozen=True)
class Sensors:
    """What the hwmon devices of a directory measure."""

    #: The hottest sensor.
    temperature_celsius: float | None = None
    #: The sum over the hwmon devices of each one's first power channel.
    power_watts: float | None = None


@dataclasses.dataclass(frozen=True)
class Readings:
    """One reading of a PCI function."""

    address: str
    aer: Aer | None
    link: Link | None
    sensors: Sensors


def read_text(path: str) -> str | None:
    """The stripped text of ``path``; None when it does not exist (any
    more). Other errors raise."""
    try:
        with open(path, encoding='utf-8') as f:
            return f.read().strip()
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ENODEV:
            # The device went away between the listing and the read.
            return None
        raise


def read_int(path: str) -> int | None:
    """``path`` as a decimal integer; None when it does not exist,
    ValueError naming it when it is not an integer."""
    text = read_text(path)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f'{path}: {text[:40]!r} is not an integer'
                         ) from None


def parse_aer(text: str, total: str) -> int:
    """The ``total`` line's count in an ``aer_dev_*`` file's ``text``."""
    for line in reversed(text.splitlines()):
        name, _, count = line.rpartition(' ')
        if name == total:
            return int(count)
    raise ValueError(f'no {total} line')


def parse_speed(text: str | None) -> float | None:
    """``8.0 GT/s PCIe`` (or ``8 GT/s``) as 8.0; None for ``Unknown``."""
    match = _SPEED_RE.match(text or '')
    return float(match.group(1)) if match else None


def _aer(directory: str, entries: set[str]) -> Aer | None:
    counts: dict[str, int] = {}
    for name, filename, total in AER_FILES:
        if filename not in entries:
            continue
        path = os.path.join(directory, filename)
        text = read_text(path)
        if text is None:
            continue
        try:
            counts[name] = parse_aer(text, total)
        except ValueError as exc:
            raise ValueError(f'{path}: {exc}') from None
    return Aer(**counts) if counts else None


def _link(directory: str, entries: set[str]) -> Link | None:
    if not entries.intersection(LINK_FILES):
        return None

    def text(name: str) -> str | None:
        return (read_text(os.path.join(directory, name))
                if name in entries else None)

    def width(name: str) -> int | None:
        return (read_int(os.path.join(directory, name))
                if name in entries else None)

    return Link(speed=parse_speed(text('current_link_speed')),
                max_speed=parse_speed(text('max_link_speed')),
                width=width('current_link_width'),
                max_width=width('max_link_width'))


def read_hwmon(directory: str) -> Sensors:
    """The sensors of the hwmon devices under ``directory``/hwmon (a PCI
    function, an FPGA management engine)."""
    hwmon = os.path.join(directory, 'hwmon')
    try:
        names = sorted(os.listdir(hwmon))
    except (FileNotFoundError, NotADirectoryError):
        return Sensors()
    temperatures: list[int] = []
    power: list[int] = []
    for name in names:
        device = os.path.join(hwmon, name)
        try:
            files = sorted(os.listdir(device))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for filename in files:
            if _TEMP_RE.match(filename):
                value = read_int(os.path.join(device, filename))
                if value is not None:
                    temperatures.append(value)
        # A device's channels may overlap (total and per rail): its
        # first one is its total. The average smooths the spikes an
        # instantaneous reading catches.
        channels = sorted(
            (int(m.group(1)), m.group(2) != 'average', m.group(0))
            for m in map(_POWER_RE.match, files) if m)
        if channels:
            value = read_int(os.path.join(device, channels[0][2]))
            if value is not None:
                power.append(value)
    return Sensors(
        temperature_celsius=(max(temperatures) / 1000 if temperatures
                             else None),
        power_watts=sum(power) / 1e6 if power else None)


def read_function(directory: str, address: str) -> Readings | None:
    """The readings of the function whose sysfs directory is
    ``directory``; None when it has gone."""
    try:
        entries = set(os.listdir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return None
    return Readings(
        address=address, aer=_aer(directory, entries),
        link=_link(directory, entries),
        sensors=(read_hwmon(directory) if 'hwmon' in entries
                 else Sensors()))
