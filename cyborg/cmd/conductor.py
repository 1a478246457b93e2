"""cyborg-conductor: owns the database and the accelerator requests."""
import sys

import cyborg.cmd  # noqa: F401  (native threads first)
from cyborg.cmd import common
from cyborg.common import rpc
from cyborg.common import service
from cyborg.conductor import service as conductor_service
from cyborg.conf import CONF
from cyborg.db import api as db_api


def main(argv: list[str] | None = None) -> int:
    common.parse_args(sys.argv[1:] if argv is None else argv)
    db_api.configure(CONF)
    rpc.init(CONF)
    try:
        service.run([conductor_service.build(CONF)])
    finally:
        rpc.cleanup()
    return 0


if __name__ == '__main__':
    sys.exit(main())
