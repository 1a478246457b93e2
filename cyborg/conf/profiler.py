"""The [profiler] group: osprofiler's options with cyborg's defaults."""
from oslo_config import cfg
from osprofiler import opts as profiler_opts

# No key by default: osprofiler's own default, "SECRET_KEY", is known to
# everyone, and with profiling enabled anyone holding a key may make the
# services write spans of their requests to the backend. Without a key no
# request is traced until the operator sets one.
_DEFAULT_HMAC_KEYS = ''
# SQL statements are most of what a request of cyborg does (a device
# list is a handful of SELECTs, a bind a few dozen statements): traced
# by default once profiling is enabled.
_DEFAULT_TRACE_SQLALCHEMY = True


def register_opts(conf: cfg.ConfigOpts) -> None:
    profiler_opts.set_defaults(conf, enabled=False,
                               trace_sqlalchemy=_DEFAULT_TRACE_SQLALCHEMY,
                               hmac_keys=_DEFAULT_HMAC_KEYS)


def set_sample_defaults() -> None:
    """The same defaults on osprofiler's option objects, which is what
    the sample generator reads (``set_defaults`` above changes those of
    one ConfigOpts only)."""
    for group, group_opts in profiler_opts.list_opts():
        if group == 'profiler':
            cfg.set_defaults(group_opts,
                             trace_sqlalchemy=_DEFAULT_TRACE_SQLALCHEMY,
                             hmac_keys=_DEFAULT_HMAC_KEYS)


def list_opts() -> dict[str, list[cfg.Opt]]:
    # osprofiler documents its own options under its own namespace
    # (``osprofiler``); only the defaults differ, and
    # set_sample_defaults() carries them into the sample.
    return {}
