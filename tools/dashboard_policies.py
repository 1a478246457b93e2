"""Write cyborg's policy defaults where Horizon reads them.

    python tools/dashboard_policies.py [--check]

Dumps the rules of the ``oslo.policy.policies`` namespace ``cyborg.api`` into
``cyborg/dashboard/conf/default_policies/cyborg.yaml`` with the functions
of Horizon's own ``manage.py dump_default_policies`` (so the file is what
Horizon's loader expects), without needing a configured Horizon. With
``--check`` it writes nothing and exits 1 when the file is not current.
Needs horizon installed (``pip install -e '.[dashboard]'``).
"""
import argparse
import io
import pathlib
import sys

import yaml
from openstack_dashboard.management.commands import dump_default_policies

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cyborg.dashboard import conf  # noqa: E402

NAMESPACE = 'cyborg.api'


def dumped() -> str:
    """The file's text, as Horizon's command writes it."""
    defaults = dump_default_policies._load_default_policies(NAMESPACE)
    if defaults is None:
        raise SystemExit(f'No oslo.policy.policies namespace {NAMESPACE}: '
                         'is cyborg installed (pip install -e .)?')
    stream = io.StringIO()
    yaml.dump([dump_default_policies._format_default_policy(d)
               for d in defaults], stream=stream)
    return stream.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--check', action='store_true',
                        help='exit 1 when the file is not current')
    args = parser.parse_args()
    path = pathlib.Path(conf.DEFAULT_POLICY_FILE)
    text = dumped()
    if args.check:
        current = path.exists() and path.read_text() == text
        if not current:
            print(f'{path} is not current: run {sys.argv[0]}')
        return 0 if current else 1
    path.write_text(text)
    print(f'Wrote {path}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
