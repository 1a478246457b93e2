"""Guru Meditation Reports: a process's threads, configuration and packages.

A process writes its report when it receives SIGUSR2 and, where
``[oslo_reports] file_event_handler`` names a file, each time that file
changes (every process of a service then reports), to stderr or to a file
of its own under ``[oslo_reports] log_dir``. The report is oslo.reports'
``TextGuruMeditation`` (``oslo_reports/guru_meditation_report.py``) with
these changes:

* each thread is named (``Thread #<ident> (<name>)``), not only numbered;
* a section lists the installed versions of cyborg's requirements;
* a password in the URL of an option that oslo.config does not mark
  secret (``[profiler] connection_string``, say) is masked too; secret
  options, among them ``[database] connection`` and ``transport_url``,
  show as ``***`` as in oslo.reports;
* a report file's name carries the process id,
  ``<prog>.<pid>_gurumeditation_<UTC YYYYmmddHHMMSS>``: the parent and
  the workers of a launcher, which all report on a file change, would
  otherwise write the same name in the same second;
* SIGUSR2 still reports when the file is watched (oslo.reports then leaves
  the signal to its default action, which ends the process).

The file is watched by a thread in each process (``watch()``), also in
the workers a launcher forks after ``setup()``: they inherit the signal
handler, but no thread.
"""
import dataclasses
import logging
import os
import re
import signal
import sys
import threading
import time
import types
from importlib import metadata
from typing import Any

from oslo_config import cfg
from oslo_reports import guru_meditation_report as gmr
from oslo_reports import opts as gmr_opts
from oslo_reports import report
from oslo_reports.generators import conf as conf_generator
from oslo_reports.generators import process as process_generator
from oslo_reports.generators import version as version_generator
from oslo_reports.models import threading as thread_models
from oslo_reports.models import with_default_views as models
from oslo_reports.views.text import generic as text_views
from oslo_reports.views.text import threading as thread_views

from cyborg import version

LOG = logging.getLogger(__name__)

# The distribution a requirement names (PEP 508: the name comes first).
_REQUIREMENT_NAME = re.compile(r'[A-Za-z0-9][A-Za-z0-9._-]*')
# The marker of the requirements of the tests (``pip install cyborg[test]``).
_TEST_EXTRA = re.compile(r'extra\s*==\s*["\']test["\']')
# The password of each user of a URL: "scheme://user:password@host" and,
# in a transport URL, every ",user:password@host" after the first.
_URL_PASSWORD = re.compile(r'((?:://|,)[^:@/,\s]*:)[^@/\s]*@')


def register_opts(conf: cfg.ConfigOpts) -> None:
    """Register the [oslo_reports] options on ``conf``."""
    gmr_opts.set_defaults(conf)


def mask(value: Any) -> Any:
    """``value`` with the password of every URL in it (a string, or the
    strings of a list or a dict's values) replaced by ``***``."""
    if isinstance(value, str):
        return _URL_PASSWORD.sub(r'\1***@', value)
    if isinstance(value, list):
        return [mask(item) for item in value]
    if isinstance(value, dict):
        return {key: mask(item) for key, item in value.items()}
    return value


def _configuration(conf: cfg.ConfigOpts) -> models.ModelWithDefaultViews:
    """oslo.reports' configuration section, secret options as ``***``,
    with URL passwords masked in the others."""
    model = conf_generator.ConfigReportGenerator(conf)()
    for group in list(model):
        model[group] = {name: mask(value)
                        for name, value in model[group].items()}
    return model


class _NamedThreadView(thread_views.ThreadView):
    FORMAT_STR = '------{thread_str: ^60}------\n{stack_trace}'

    def __call__(self, model: thread_models.ThreadModel) -> str:
        return self.FORMAT_STR.format(
            thread_str=f' Thread #{model.thread_id} ({model.name}) ',
            stack_trace=model.stack_trace)


def _threads(current: types.FrameType | None
             ) -> models.ModelWithDefaultViews:
    """Every thread's stack, with its name; this thread's at ``current``,
    the frame the signal interrupted, rather than in the report."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    frames = sys._current_frames()
    if current is not None:
        frames[threading.get_ident()] = current
    found = {}
    for ident, frame in frames.items():
        thread = thread_models.ThreadModel(ident, frame)
        thread['name'] = names.get(ident, 'not started by threading')
        thread.views['text'] = _NamedThreadView()
        found[ident] = thread
    return models.ModelWithDefaultViews(found,
                                        text_view=text_views.MultiView())


def _packages() -> models.ModelWithDefaultViews:
    """The installed version of each requirement of cyborg (those of its
    extras too where installed, but the tests'), by distribution name."""
    try:
        wanted = metadata.requires('cyborg') or []
    except metadata.PackageNotFoundError:
        wanted = []
    found = {}
    for line in wanted:
        match = _REQUIREMENT_NAME.match(line)
        if match is None or _TEST_EXTRA.search(line):
            continue
        try:
            found[match.group(0)] = metadata.version(match.group(0))
        except metadata.PackageNotFoundError:
            # An extra's requirement that is not installed.
            continue
    return models.ModelWithDefaultViews(
        dict(sorted(found.items(), key=lambda item: item[0].lower())),
        text_view=text_views.KeyValueView())


class GuruMeditation(gmr.TextGuruMeditation):
    """oslo.reports' text report with cyborg's sections (see the module)."""

    conf: cfg.ConfigOpts = cfg.CONF

    def run(self) -> str:
        # These sections instead of those GuruMeditation.run() adds before
        # it runs the report (its green threads, which cyborg has none of,
        # among them), through the report's public interface alone.
        del self.sections[self.start_section_index:]
        self.add_section('Package', version_generator.PackageReportGenerator(
            self.version_obj))
        self.add_section('Threads', lambda: _threads(self.traceback))
        self.add_section('Processes',
                         process_generator.ProcessReportGenerator())
        self.add_section('Configuration', lambda: _configuration(self.conf))
        self.add_section('Installed packages', _packages)
        return report.BasicReport.run(self)

    @classmethod
    def handle_signal(cls, version: Any, service_name: str | None,
                      log_dir: str | None,
                      frame: types.FrameType | None) -> None:
        super().handle_signal(version, f'{service_name}.{os.getpid()}',
                              log_dir, frame)


@dataclasses.dataclass
class _Setup:
    """What ``setup()`` was given, for ``watch()`` in a forked worker."""

    prog: str = 'cyborg'
    log_dir: str | None = None
    path: str | None = None
    interval: int = 1
    # The process whose thread watches the file.
    watching: int | None = None


_setup = _Setup()


def setup(conf: cfg.ConfigOpts, prog: str, use_signal: bool = True
          ) -> None:
    """Report on SIGUSR2 (unless ``use_signal`` is False) and, when
    ``[oslo_reports] file_event_handler`` is set, each time that file
    changes; ``prog`` names the report files. Call it in the main thread,
    before a launcher forks: its workers inherit the handler of SIGUSR2,
    which oslo.service's launchers (cotyledon) leave alone.

    oslo.reports' own ``setup_autorun`` takes the file instead of the
    signal; here both trigger a report, so that a SIGUSR2 sent out of
    habit writes a report rather than ending the process (SIGUSR2's
    default action)."""
    register_opts(conf)
    GuruMeditation.conf = conf
    global _setup
    _setup = _Setup(prog, conf.oslo_reports.log_dir,
                    conf.oslo_reports.file_event_handler,
                    conf.oslo_reports.file_event_handler_interval)
    if use_signal:
        signal.signal(signal.SIGUSR2, _on_signal)
    watch()


def _on_signal(signum: int, frame: types.FrameType | None) -> None:
    GuruMeditation.handle_signal(version, _setup.prog, _setup.log_dir, frame)


def watch() -> None:
    """Watch ``[oslo_reports] file_event_handler`` from this process, if
    it is set and no thread of this process watches it yet: a launcher's
    worker calls this once it runs, the threads of its parent being lost
    in the fork."""
    if not _setup.path or _setup.watching == os.getpid():
        return
    _setup.watching = os.getpid()
    threading.Thread(target=_watch, name='guru-meditation-file',
                     args=(_setup.path, _setup.interval),
                     daemon=True).start()


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def _watch(path: str, interval: float) -> None:
    """Write a report each time ``path``'s modification time changes, or
    it appears, checked every ``interval`` seconds. Unlike oslo.reports'
    watcher, a missing file is no error: ``touch`` creates it and so
    triggers a report."""
    LOG.debug('Guru Meditation Reports when %s changes', path)
    seen = _mtime(path)
    while True:
        time.sleep(interval)
        now = _mtime(path)
        if now is not None and now != seen:
            GuruMeditation.handle_signal(version, _setup.prog,
                                         _setup.log_dir, None)
        seen = now
