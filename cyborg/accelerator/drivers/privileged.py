"""Running the external tools that drivers act on devices with.

Every driver that calls a vendor tool (``fpgaconf``, ``xbmgmt``, ...) goes
through :func:`execute`: an argument list, never a shell string; the
``[agent] root_helper`` prefix when the agent does not run as root; a
time limit after which the tool is stopped; and a non-zero exit, a missing
tool or a time-out raised as ``DeviceActionError`` carrying the tool's own
error output.
"""
import logging
import subprocess
from collections.abc import Sequence
from typing import Any

from oslo_concurrency import processutils

from cyborg.common import exception

LOG = logging.getLogger(__name__)

# The most of a tool's output an error message carries: its last lines
# say what went wrong, and the message travels over RPC to the API.
MAX_OUTPUT = 2000
# Seconds a tool gets to exit after SIGTERM before it is killed.
_GRACE = 5


def _tail(text: str) -> str:
    text = text.strip()
    return text if len(text) <= MAX_OUTPUT else '...' + text[-MAX_OUTPUT:]


def _stop(process: subprocess.Popen[Any]) -> None:
    process.terminate()
    try:
        process.wait(_GRACE)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def execute(argv: Sequence[str], *, action: str, device: str,
            root_helper: str = '', timeout: float | None = None,
            process_input: str | None = None) -> str:
    """Run ``argv`` and return what it wrote to stdout.

    ``root_helper`` (``[agent] root_helper``, e.g. ``sudo``) is put in
    front of ``argv`` unless the agent already runs as root; empty runs
    the tool as the agent's user. ``action`` and ``device`` name what is
    being done for error messages. Raises DeviceActionError when the tool
    cannot be started, exits non-zero (with its stderr, or its stdout if
    it wrote nothing to stderr) or runs longer than ``timeout`` seconds,
    in which case it is stopped. ``process_input`` is written to the
    tool's stdin.
    """
    argv = [str(arg) for arg in argv]
    started: list[subprocess.Popen[Any]] = []

    def fail(reason: str) -> exception.DeviceActionError:
        return exception.DeviceActionError(action=action, device=device,
                                           reason=reason)

    try:
        stdout, stderr = processutils.execute(
            *argv, run_as_root=bool(root_helper), root_helper=root_helper,
            # Annotated int, but handed to Popen.communicate, which takes
            # any number of seconds.
            timeout=timeout,  # type: ignore[arg-type]
            on_execute=started.append,
            process_input=process_input)
    except processutils.ProcessExecutionError as exc:
        output = _tail(exc.stderr or '') or _tail(exc.stdout or '')
        raise fail(f'{argv[0]} exited with status {exc.exit_code}: '
                   f'{output or "(no output)"}') from exc
    except subprocess.TimeoutExpired as exc:
        if started:
            _stop(started[0])
        raise fail(f'{argv[0]} did not finish within {timeout} seconds '
                   'and was stopped') from exc
    except OSError as exc:
        raise fail(f'cannot run {argv[0]}: {exc}') from exc
    if stderr.strip():
        LOG.debug('%s wrote to stderr: %s', argv[0], _tail(str(stderr)))
    return str(stdout)
