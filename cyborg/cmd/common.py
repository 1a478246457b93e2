"""What every cyborg command does before and around its service."""
import logging
import threading
from collections.abc import Callable

from oslo_config import cfg
from oslo_log import log
from oslo_service import service

from cyborg import conf as cyborg_conf
from cyborg import version
from cyborg.common import patches
from cyborg.common import profiler
from cyborg.common import reports
from cyborg.common import rpc
from cyborg.conf import opts

LOG = logging.getLogger(__name__)

# Seconds an idle RabbitMQ listener (an RPC server's queue, a client's
# reply queue) blocks in one read before it looks at its stop flag again.
# Stopping a server or the transport waits for that read: oslo.messaging's
# 5 s made a conductor take up to 5 s to stop on SIGTERM, and an agent,
# whose server and reply queue stop one after the other, up to 10 s. An
# idle listener now wakes once a second for a read that times out: an idle
# RPC server took 0.4 ms of CPU a second instead of 0.1 ms. A message is
# taken the moment it arrives either way.
IDLE_POLL = 1.0

# The program ``parse_args`` was given: the service of this process's
# spans (see ``setup_tracing``).
_prog = 'cyborg'


def parse_args(argv: list[str], prog: str,
               conf: cfg.ConfigOpts = cyborg_conf.CONF,
               default_config_files: list[str] | None = None,
               report_signal: bool = True) -> None:
    """Register logging options, parse the command line and files, and
    set up the Guru Meditation Reports of ``prog`` (on SIGUSR2 unless
    ``report_signal`` is False; see ``cyborg.common.reports``)."""
    global _prog
    log.register_options(conf)
    reports.register_opts(conf)
    opts.set_log_defaults()
    rpc.set_defaults()
    conf(argv, project='cyborg', version=version.version_string(),
         default_config_files=default_config_files)
    log.setup(conf, 'cyborg')
    reports.setup(conf, prog, use_signal=report_signal)
    _prog = prog


def setup_tracing(conf: cfg.ConfigOpts = cyborg_conf.CONF) -> None:
    """Trace this process's requests as the program ``parse_args`` was
    given, when ``[profiler] enabled`` (see ``cyborg.common.profiler``).
    Once per process, after a launcher's fork: the backend's client is
    the process's own."""
    profiler.setup(conf, _prog)


class Launched(service.ServiceBase):
    """The service ``make()`` returns, made in the process that runs it.

    oslo.service's launchers fork before they start a service, and two
    processes must not share a database pool or a RabbitMQ connection:
    ``start()`` opens this process's tracing, its RPC transport and, with
    ``database``, its database engine, then makes and starts the service.
    A ``stop()`` that comes while the service still starts (its broker or
    database may not answer) returns at once, and the launcher ends the
    process.
    """

    def __init__(self, make: Callable[[], service.ServiceBase],
                 database: bool = False,
                 conf: cfg.ConfigOpts = cyborg_conf.CONF) -> None:
        self.make = make
        self.database = database
        self.conf = conf
        self.service: service.ServiceBase | None = None
        self._lock = threading.Lock()
        self._stopping = False
        self._stopped = threading.Event()

    def start(self) -> None:
        with self._lock:
            if self._stopping:
                return
        # A launcher's worker: its parent's thread watching the report
        # trigger file did not survive the fork.
        reports.watch()
        setup_tracing(self.conf)
        if self.database:
            # Here, not at the top: an agent, which never has a database,
            # must not load SQLAlchemy (test_import_boundaries).
            from cyborg.db import api as db_api

            db_api.configure(self.conf)
        rpc.init(self.conf)
        patches.poll_idle_at_most(IDLE_POLL)
        made = self.make()
        made.start()
        with self._lock:
            if not self._stopping:
                self.service = made

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            made, self.service = self.service, None
        if made is None:
            LOG.info('Stopped while starting.')
        else:
            made.stop()
            rpc.cleanup()
        self._stopped.set()

    def wait(self) -> None:
        made = self.service
        if made is not None:
            made.wait()
        else:
            self._stopped.wait()

    def reset(self) -> None:
        """Nothing to reset: on SIGHUP the launcher starts a new process."""


def launch(make: Callable[[], service.ServiceBase], database: bool = False,
           workers: int = 1) -> int:
    """Run ``make()``'s service in ``workers`` child processes until
    SIGTERM, under oslo.service's ServiceLauncher (one) or ProcessLauncher
    (more). Each child makes its own (see ``Launched``); a new one takes
    over when one dies, and on SIGHUP, with the files read again."""
    conf = cyborg_conf.CONF
    launcher = (service.ServiceLauncher(conf) if workers == 1
                else service.ProcessLauncher(conf))
    launcher.launch_service(Launched(make, database), workers=workers)
    try:
        code = launcher.wait()
    except SystemExit as stopped:
        # ProcessLauncher ends its wait() so once its workers have stopped.
        code = stopped.code
    # 0 or None once stopped as asked; a message would mean a failure.
    return code if isinstance(code, int) else int(bool(code))
