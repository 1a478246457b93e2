"""cyborg-conductor: owns the database and the accelerator requests."""
import sys

import cyborg.cmd  # noqa: F401  (native threads first)
from cyborg.cmd import common
from cyborg.conductor import service as conductor_service
from cyborg.conf import CONF


def main(argv: list[str] | None = None) -> int:
    common.parse_args(sys.argv[1:] if argv is None else argv,
                      'cyborg-conductor')
    return common.launch(lambda: conductor_service.build(CONF),
                         database=True)


if __name__ == '__main__':
    sys.exit(main())
