"""The [database] group: oslo.db's options with cyborg's SQLite default."""
from oslo_config import cfg
from oslo_db import options as db_options

_DEFAULT_CONNECTION = 'sqlite:///$state_path/cyborg.sqlite'
# A conductor serves RPC calls on many threads, each with a connection;
# oslo.db's default pool of 5 made every call past the fifth open and
# close a connection of its own, which cost half a bind's CPU time.
_DEFAULT_POOL_SIZE = 32


def register_opts(conf: cfg.ConfigOpts) -> None:
    db_options.set_defaults(conf, connection=_DEFAULT_CONNECTION,
                            max_pool_size=_DEFAULT_POOL_SIZE)
    # Also on the option objects, which is what the sample generator reads.
    cfg.set_defaults(db_options.database_opts,
                     connection=_DEFAULT_CONNECTION,
                     max_pool_size=_DEFAULT_POOL_SIZE)


def list_opts() -> dict[str, list[cfg.Opt]]:
    # oslo.db documents its own options under its own namespace; only the
    # default differs, and set_defaults() carries that into the sample.
    return {}
