"""cyborg-agent: discovers this host's accelerators and reports them."""
import sys

import cyborg.cmd  # noqa: F401  (native threads first)
from cyborg.agent import driver_control
from cyborg.agent import service as agent_service
from cyborg.cmd import common
from cyborg.common import exception
from cyborg.conf import CONF


def main(argv: list[str] | None = None) -> int:
    common.parse_args(sys.argv[1:] if argv is None else argv,
                      'cyborg-agent')
    try:
        # [agent] enabled_drivers as the operator changed it on this host.
        loaded = driver_control.load_enabled(CONF)
    except (exception.DriverNotFound, exception.DriverError) as exc:
        print(f'cyborg-agent: {exc}', file=sys.stderr)
        return 2
    return common.launch(lambda: agent_service.build(CONF, loaded))


if __name__ == '__main__':
    sys.exit(main())
