"""Nova's own Cyborg client (``nova.accelerator.cyborg``) in a child process.

Nova and cyborg both register their options on oslo.config's process-wide
CONF, and some names clash (``[DEFAULT] host``, ``[api] max_limit``), so
the two cannot be loaded in one process. Nova's side therefore runs in a
child Python process (this module run with ``-m``), configured by a
nova.conf, taking one call per line on stdin and answering in JSON; a test
drives it step by step as Nova's conductor and compute do.

Nothing in this module imports cyborg or nova at module level, so that the
child loads only Nova.
"""
import dataclasses
import json
import os
import pathlib
import select
import subprocess
import sys
from typing import Any

REPLY_TIMEOUT = 60  # seconds


class NovaError(Exception):
    """An exception raised by Nova's client in the child."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f'{name}: {message}')
        self.name = name
        self.message = message


@dataclasses.dataclass
class NovaSide:
    """The child process; ``nova(name, *args)`` calls Nova's client."""

    process: subprocess.Popen
    stderr_path: str

    def __call__(self, name: str, *args: Any) -> Any:
        self.process.stdin.write(json.dumps([name, list(args)]) + '\n')
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [],
                                    REPLY_TIMEOUT)
        line = self.process.stdout.readline() if ready else ''
        if not line:
            raise AssertionError(f'no reply from Nova to {name}:\n'
                                 + self.stderr())
        reply = json.loads(line)
        if 'error' in reply:
            raise NovaError(reply['error'], reply['message'])
        return reply['result']

    def stderr(self) -> str:
        with open(self.stderr_path) as f:
            return f.read()[-5000:]

    def close(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()


def start(config: pathlib.Path, stderr_path: pathlib.Path) -> NovaSide:
    """Nova's side configured by the nova.conf ``config``, its standard
    error in ``stderr_path``; skipped (or failed where services are
    required) without the nova package."""
    # Here, not at module level: the child must not load cyborg.
    from cyborg.tests.conftest import require_module
    require_module('nova')
    with open(stderr_path, 'w') as stderr:
        process = subprocess.Popen(
            [sys.executable, '-m', __name__, str(config)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
            text=True, env=dict(os.environ, PYTHONWARNINGS='ignore'))
    return NovaSide(process, str(stderr_path))


# --- the child process ------------------------------------------------------

def _serve(config_file: str) -> None:
    """Nova's client, configured from ``config_file``: one JSON call
    ``[name, args]`` per line of stdin, one JSON reply per line."""
    replies = sys.stdout
    sys.stdout = sys.stderr  # nothing else may write to the reply channel

    import nova.conf
    from nova import context as nova_context
    from nova import objects
    from nova.accelerator import cyborg

    nova.conf.CONF(['--config-file', config_file], project='nova',
                   default_config_files=[], default_config_dirs=[])
    objects.register_all()
    # Nova passes on the token of the user who asked; under noauth,
    # 'admin' is an administrator of project admin.
    ctx = nova_context.RequestContext(user_id='admin', project_id='admin',
                                      auth_token='admin')

    def call(name: str, args: list[Any]) -> Any:
        if name == 'get_device_profile_request_groups':
            return [{'requester_id': g.requester_id,
                     'resources': dict(g.resources),
                     'required_traits': sorted(g.required_traits),
                     'forbidden_traits': sorted(g.forbidden_traits)}
                    for g in cyborg.get_device_profile_request_groups(
                        ctx, *args)]
        # As in Nova, a new client for each operation.
        client = cyborg.get_client(ctx)
        if name == 'get_arq_uuids_for_instance':
            args = [objects.Instance(uuid=args[0])]
        elif name == 'delete_arqs_by_uuid':
            args = [dict.fromkeys(args[0]).keys()]  # Nova passes dict keys
        return getattr(client, name)(*args)

    for line in sys.stdin:
        name, args = json.loads(line)
        try:
            reply = {'result': call(name, args)}
        except Exception as exc:
            reply = {'error': type(exc).__name__, 'message': str(exc)}
        replies.write(json.dumps(reply) + '\n')
        replies.flush()


if __name__ == '__main__':
    _serve(sys.argv[1])
