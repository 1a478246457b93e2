"""cyborg-status: checks an operator runs before and after an upgrade."""
import functools
import json
import sys
from typing import Any

from keystoneauth1 import exceptions as ks_exc
from oslo_config import cfg
from oslo_db import exception as db_exc
from oslo_policy import policy as oslo_policy
from oslo_upgradecheck import upgradecheck

import cyborg.cmd  # noqa: F401  (native threads first)
from cyborg import context as cyborg_context
from cyborg import version as cyborg_version
from cyborg.api import policy as cyborg_policy
from cyborg.common import exception
from cyborg.common import keystone
from cyborg.conductor import manager
from cyborg.conductor import placement_client
from cyborg.conf import CONF
from cyborg.db import api as db_api
from cyborg.db import migration
from cyborg.db import upstream
from cyborg.db.api import services

PROG = 'cyborg-status'

Code = upgradecheck.Code
Result = upgradecheck.Result

_DESCRIPTION = (
    'Checks whether this cyborg deployment is ready to run: run '
    '"upgrade check" with the configuration files of the services, after '
    'installing new code and again after upgrading the database. The exit '
    'status is 0 when every check passed, 1 when one gave a warning, 2 '
    'when one failed and 255 when a check could not run.')


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split('.'))


# The newest placement microversion the conductor's client asks for.
PLACEMENT_MIN_VERSION = max(
    (value for name, value in vars(placement_client).items()
     if name.startswith('MV_')), key=_version)


class Checks(upgradecheck.UpgradeCommands):
    """The checks behind ``cyborg-status upgrade check``."""

    @functools.cached_property
    def _schema(self) -> tuple[upstream.Found | None, str | None]:
        """What the database holds, or why it could not be read."""
        try:
            return migration.recognise(), None
        except exception.DBNotReachable as exc:
            return None, (f'{exc}. Check [database] connection and that '
                          f'the database server is running.')

    def _check_schema(self) -> upgradecheck.Result:
        found, error = self._schema
        if error or found is None:
            return Result(Code.FAILURE, error)
        head = migration.head()
        if found.kind is upstream.Kind.EMPTY:
            return Result(Code.FAILURE,
                          'The database has no cyborg schema yet. Run '
                          '"cyborg-dbsync upgrade".')
        if found.kind in (upstream.Kind.UPSTREAM, upstream.Kind.ADOPTING):
            return Result(Code.FAILURE,
                          f'The database holds {found.description}. Run '
                          '"cyborg-dbsync adopt" (see the install guide).')
        if found.kind is upstream.Kind.OTHER:
            if found.revision and found.revision not in \
                    upstream.UPSTREAM_REVISIONS:
                return Result(Code.FAILURE,
                              f'The database schema is at revision '
                              f'{found.revision}, which this version of '
                              f'cyborg does not know: newer code upgraded '
                              f'it. Run the cyborg-status of that version.')
            return Result(Code.FAILURE,
                          f'The database holds {found.description}; '
                          'cyborg cannot use it.')
        if found.revision == head:
            return Result(Code.SUCCESS)
        return Result(Code.FAILURE,
                      f'The database schema is at revision '
                      f'{found.revision}; this version of cyborg needs '
                      f'{head}. Run "cyborg-dbsync upgrade".')

    def _check_placement(self) -> upgradecheck.Result:
        if not manager.placement_configured(CONF):
            return Result(Code.WARNING,
                          'Placement is not configured ([placement] sets '
                          'neither auth_type nor endpoint_override), so the '
                          'conductor publishes no device to placement and '
                          'Nova cannot schedule instances that ask for '
                          'accelerators. Configure [placement] with a '
                          'service user.')
        try:
            adapter = keystone.get_adapter(CONF, 'placement')
            response = adapter.get('/', raise_exc=False)
        except ks_exc.ClientException as exc:
            return Result(Code.FAILURE,
                          f'Cannot call placement with the [placement] '
                          f'options: {" ".join(str(exc).split())}. Check '
                          f'them, the service user\'s credentials and '
                          f'that placement runs.')
        if response.status_code != 200:
            return Result(Code.FAILURE,
                          f'Placement answered GET {response.url} with '
                          f'{response.status_code}, not with its version '
                          f'document. Check the placement endpoint and '
                          f'[placement] endpoint_override.')
        try:
            max_version = max(
                (entry['max_version'] for entry
                 in response.json()['versions']), key=_version)
        except (ValueError, KeyError, TypeError, AttributeError):
            return Result(Code.FAILURE,
                          f'{response.url} did not answer with a placement '
                          f'version document. Check the placement endpoint '
                          f'and [placement] endpoint_override.')
        if _version(max_version) < _version(PLACEMENT_MIN_VERSION):
            return Result(Code.FAILURE,
                          f'Placement supports microversions up to '
                          f'{max_version}; cyborg needs '
                          f'{PLACEMENT_MIN_VERSION}. Upgrade placement '
                          f'first.')
        return Result(Code.SUCCESS)

    def _check_policy_file(self) -> upgradecheck.Result:
        path = CONF.find_file(CONF.oslo_policy.policy_file)
        if not path:
            # No file: the defaults in the code apply.
            return Result(Code.SUCCESS)
        try:
            with open(path, encoding='utf-8') as policy_file:
                text = policy_file.read()
        except (OSError, UnicodeDecodeError) as exc:
            return Result(Code.FAILURE,
                          f'Cannot read the policy file {path}: {exc}')
        try:
            rules = json.loads(text)
            is_json = True
        except ValueError:
            is_json = False
            try:
                rules = oslo_policy.parse_file_contents(text)
            except ValueError as exc:
                return Result(Code.FAILURE,
                              f'The policy file {path} is neither YAML nor '
                              f'JSON, so cyborg-api rejects every request: '
                              f'{" ".join(str(exc).split())}')
        if not isinstance(rules, dict) or not all(
                isinstance(rule, (str, list)) for rule in rules.values()):
            return Result(Code.FAILURE,
                          f'The policy file {path} is not a mapping of '
                          f'policy names to rules, so cyborg-api rejects '
                          f'every request.')
        if is_json:
            return Result(Code.WARNING,
                          f'The policy file {path} is JSON, which '
                          f'oslo.policy has deprecated. Convert it to YAML '
                          f'with oslopolicy-convert-json-to-yaml '
                          f'--namespace cyborg.api and set [oslo_policy] '
                          f'policy_file to the new file.')
        return Result(Code.SUCCESS)

    def _check_agents(self) -> upgradecheck.Result:
        found, error = self._schema
        if found is None or found.kind is not upstream.Kind.OURS:
            state = ('cannot be reached' if error else
                     'has no schema yet' if found and
                     found.kind is upstream.Kind.EMPTY
                     else 'has no cyborg schema')
            return Result(Code.WARNING,
                          f'Not checked: the database {state} (see the '
                          f'"Database schema" check).')
        db_api.configure(CONF)
        try:
            agents = services.get_all(cyborg_context.get_admin_context(),
                                      'cyborg-agent', CONF.service_down_time)
        except db_exc.DBError as exc:
            return Result(Code.FAILURE, f'Cannot list the agents: {exc}')
        if not agents:
            return Result(Code.WARNING,
                          'No cyborg-agent has ever sent a heartbeat, so no '
                          'accelerator is known. Start cyborg-agent on the '
                          'compute hosts, with the [DEFAULT] transport_url '
                          'of the conductor.')
        down = [agent for agent in agents if not agent['alive']]
        if down:
            names = ', '.join(f'{a["host"]} (last seen '
                              f'{a["last_seen_at"]:%Y-%m-%d %H:%M:%S} UTC)'
                              for a in down)
            return Result(Code.WARNING,
                          f'{len(down)} of {len(agents)} agents have sent no '
                          f'heartbeat for [DEFAULT] service_down_time '
                          f'({CONF.service_down_time}s): {names}. Their '
                          f'devices cannot be bound until they are back.')
        return Result(Code.SUCCESS)

    _upgrade_checks = (
        ('Database schema', _check_schema),
        ('Placement API', _check_placement),
        ('Policy file', _check_policy_file),
        ('Agents alive', _check_agents),
    )


def _add_commands(checks: Checks) -> Any:
    def add(subparsers: Any) -> None:
        upgrade = subparsers.add_parser(
            'upgrade', help='checks for an upgrade',
            description='Checks for an upgrade.')
        upgrade.add_argument(
            'check', choices=['check'],
            help='check the database schema, placement, the policy file '
                 'and the agents, and print what needs doing')
        upgrade.add_argument(
            '--json', action='store_true',
            help='print the results as JSON instead of a table')
        upgrade.set_defaults(action_fn=checks.check)
    return add


def main(argv: list[str] | None = None) -> int:
    """Run ``upgrade check``; return its exit status."""
    CONF.register_cli_opt(cfg.SubCommandOpt(
        'command', title='commands', handler=_add_commands(Checks()),
        help=f'run "{PROG} COMMAND --help" for the options of a command'))
    cyborg_policy.set_defaults(CONF)
    try:
        CONF(sys.argv[1:] if argv is None else argv, project='cyborg',
             prog=PROG, version=cyborg_version.version_string(),
             description=_DESCRIPTION)
    except cfg.Error as exc:  # a missing or malformed configuration file
        print(f'{PROG}:', *str(exc).split(), file=sys.stderr)
        return 255
    # check() reads --json from the module's CONF.
    upgradecheck.CONF = CONF
    return upgradecheck.run(CONF)


if __name__ == '__main__':
    sys.exit(main())
