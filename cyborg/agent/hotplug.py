"""PCI hot-plug: device events that make the agent report at once.

A reader thread takes ``(action, device)`` pairs from an event source -
a netlink socket filtered on subsystem ``pci`` on a host, any iterable in
tests - and a second thread turns each burst of relevant events into one
call of ``trigger`` (the agent-report task's ``trigger``): the first event
opens a window of ``debounce`` seconds, the events inside it are folded
in, and ``trigger`` runs when it closes. The discovery pass that follows
decides, as always, whether anything is sent.

The socket listens to udevd, which passes each kernel uevent on once its
rules have run, or, where udevd does not run (containers, minimal hosts),
to the kernel's uevents themselves: udevd would never send anything there.
"""
import logging
import os
import threading
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from typing import Any

import pyudev

LOG = logging.getLogger(__name__)

#: udev actions after which the host's PCI inventory may differ.
ACTIONS = frozenset(('add', 'remove', 'bind', 'unbind', 'change'))

Event = tuple[str, Any]
# How long a udev poll blocks, so that the reader notices stop().
_POLL_SECONDS = 1.0
_DEBOUNCE_THREAD = 'hotplug-debounce'


def netlink_sources(context: pyudev.Context) -> list[str]:
    """The netlink sources to try, best first.

    udevd passes a uevent on once its rules have run (the device is ready
    and has its udev properties), but only where udevd runs, which its
    control socket shows: systemd's own device monitor makes the same
    test. The kernel sends its uevents whether udevd runs or not, into
    the host's network namespaces and those of containers that share the
    host's user namespace.
    """
    if os.path.exists(os.path.join(context.run_path, 'control')):
        return ['udev', 'kernel']
    return ['kernel']


def listen(context: pyudev.Context, source: str,
           stopping: threading.Event) -> Iterator[Event]:
    """PCI events from ``source`` ('udev' or 'kernel') until ``stopping``
    is set; raises OSError at once when the socket cannot be opened."""
    monitor = pyudev.Monitor.from_netlink(context, source=source)
    # The socket filter libudev builds from this reads udevd's header and
    # lets kernel uevents, which have none, through; libudev checks their
    # subsystem when it receives them, so both sources yield PCI only.
    monitor.filter_by('pci')
    monitor.start()

    def events() -> Iterator[Event]:
        while not stopping.is_set():
            device = monitor.poll(timeout=_POLL_SECONDS)
            if device is not None:
                yield device.action, device

    return events()


def open_udev(stopping: threading.Event) -> Iterator[Event] | None:
    """Listen for PCI events from the best source that opens; None, after
    one warning, when none does (no libudev, no netlink socket, missing
    permission)."""
    errors: list[str] = []
    try:
        # pyudev loads libudev here, and ImportError says it is missing.
        context = pyudev.Context()
        candidates = netlink_sources(context)
    except ImportError as exc:
        errors.append(f'{type(exc).__name__}: {exc}')
        candidates = []
    for source in candidates:
        try:
            events = listen(context, source, stopping)
        except OSError as exc:
            errors.append(f'{source}: {type(exc).__name__}: {exc}')
            continue
        if source == 'udev':
            LOG.debug('Watching udevd\'s PCI events.')
        elif 'udev' in candidates:
            LOG.info('Watching the kernel\'s PCI uevents, as udevd\'s could '
                     'not be opened (%s).', '; '.join(errors))
        else:
            LOG.info('udevd does not run here (no %s); watching the '
                     'kernel\'s PCI uevents, which come before any udev '
                     'rule has run.',
                     os.path.join(context.run_path, 'control'))
        return events
    LOG.warning('PCI hot-plug events are not available here (%s); added '
                'and removed devices are found by the periodic discovery '
                'pass only.', '; '.join(errors))
    return None


class HotplugMonitor:
    """Calls ``trigger`` once per burst of PCI hot-plug events.

    ``events`` is the event source; None opens a netlink socket at
    ``start()`` (see ``open_udev``).
    """

    def __init__(self, trigger: Callable[[], None], debounce: float,
                 events: Iterable[Event] | None = None) -> None:
        self.trigger = trigger
        self.debounce = debounce
        self._source = events
        self._stopping = threading.Event()
        self._cond = threading.Condition()
        self._window_open = False
        self._folded = 0
        self._threads: list[threading.Thread] = []

    def start(self) -> bool:
        """Start watching; False (after one warning) when events cannot be
        received here, in which case the periodic pass finds changes."""
        events = self._source
        if events is None:
            events = open_udev(self._stopping)
            if events is None:
                return False
        self._threads = [
            threading.Thread(target=self._read, args=(events,),
                             name='hotplug-events', daemon=True),
            threading.Thread(target=self._debounce,
                             name=_DEBOUNCE_THREAD, daemon=True)]
        for thread in self._threads:
            thread.start()
        LOG.debug('Watching PCI hot-plug events (debounce %ss).',
                  self.debounce)
        return True

    def stop(self, timeout: float = 5) -> None:
        """Return once ``trigger`` can no longer be called."""
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()
        # Only the debounce thread calls trigger. The reader, a daemon, only
        # counts events: it ends at its next poll (up to _POLL_SECONDS) or,
        # on an injected source, its next event, and the agent's stop does
        # not wait for that.
        for thread in self._threads:
            if thread.name == _DEBOUNCE_THREAD:
                thread.join(timeout)
        self._threads = []

    def _read(self, events: Iterable[Event]) -> None:
        try:
            for action, device in events:
                if self._stopping.is_set():
                    return
                if action in ACTIONS:
                    LOG.debug('PCI %s: %s', action,
                              getattr(device, 'sys_name', device))
                    self._event()
        except Exception:
            LOG.warning('Stopped watching PCI hot-plug events; added and '
                        'removed devices are found by the periodic '
                        'discovery pass only.', exc_info=True)

    def _event(self) -> None:
        with self._cond:
            self._folded += 1
            if not self._window_open:
                self._window_open = True
                self._cond.notify_all()

    def _debounce(self) -> None:
        while True:
            with self._cond:
                while not self._window_open and not self._stopping.is_set():
                    self._cond.wait()
            # The window: later events only add to the count.
            if self._stopping.wait(self.debounce):
                return
            with self._cond:
                folded, self._folded = self._folded, 0
                self._window_open = False
            LOG.debug('%d PCI hot-plug event(s); discovering now.', folded)
            try:
                self.trigger()
            except Exception:
                LOG.exception('Could not start a discovery pass after PCI '
                              'hot-plug events')
