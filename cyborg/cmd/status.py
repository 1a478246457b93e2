"""cyborg-status: checks an operator runs before and after an upgrade."""
import sys

from oslo_policy import opts as policy_opts
from oslo_upgradecheck import common_checks
from oslo_upgradecheck import upgradecheck

import cyborg.cmd  # noqa: F401  (native threads first)
from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.conf import CONF
from cyborg.db import api as db_api
from cyborg.db import migration
from cyborg.db.api import services

Code = upgradecheck.Code
Result = upgradecheck.Result


class Checks(upgradecheck.UpgradeCommands):
    """The checks behind ``cyborg-status upgrade check``."""

    def _check_schema(self) -> upgradecheck.Result:
        try:
            current = migration.version()
        except exception.DBNotReachable as exc:
            return Result(Code.FAILURE, str(exc))
        head = migration.head()
        if current != head:
            return Result(Code.FAILURE,
                          f'The database schema is at {current}, not at '
                          f'{head}. Run "cyborg-dbsync upgrade".')
        return Result(Code.SUCCESS)

    def _check_agents(self) -> upgradecheck.Result:
        db_api.configure(CONF)
        try:
            agents = services.get_all(cyborg_context.get_admin_context(),
                                      'cyborg-agent', CONF.service_down_time)
        except Exception as exc:  # the schema check reports the cause
            return Result(Code.FAILURE, f'Cannot list agents: {exc}')
        if not agents:
            return Result(Code.WARNING,
                          'No cyborg-agent has registered yet, so no '
                          'accelerator is known. Start cyborg-agent on the '
                          'compute hosts.')
        down = [a['host'] for a in agents if not a['alive']]
        if down:
            return Result(Code.WARNING,
                          f'{len(down)} of {len(agents)} agent(s) have not '
                          f'sent a heartbeat for {CONF.service_down_time}s: '
                          f'{", ".join(down)}.')
        return Result(Code.SUCCESS)

    _upgrade_checks = (
        ('Database schema', _check_schema),
        ('Agents alive', _check_agents),
        ('Policy File JSON to YAML Migration',
         (common_checks.check_policy_json, {'conf': CONF})),
    )


def main(argv: list[str] | None = None) -> int:
    if argv is not None:
        sys.argv[1:] = argv
    policy_opts.set_defaults(CONF)
    return upgradecheck.main(CONF, project='cyborg', upgrade_command=Checks())


if __name__ == '__main__':
    sys.exit(main())
