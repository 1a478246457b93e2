"""keystoneauth options shared by the groups of the services cyborg calls."""
import copy

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

# Seconds before a request to another service is abandoned: a hung peer
# must not hold a conductor thread forever.
TIMEOUT = 30


def _session_and_adapter_opts(service_type: str,
                              interfaces: tuple[str, ...]) -> list[cfg.Opt]:
    # Copies with cyborg's defaults. Defaults are part of the options
    # rather than set with set_default(), which ConfigOpts.reset() undoes.
    defaults = {'service_type': service_type,
                'valid_interfaces': list(interfaces), 'timeout': TIMEOUT}
    opts = []
    for opt in (ks_loading.get_session_conf_options()
                + ks_loading.get_adapter_conf_options(
                    include_deprecated=False)):
        if opt.dest in defaults:
            opt = copy.deepcopy(opt)
            opt.default = defaults[opt.dest]
        opts.append(opt)
    return opts


def register_client_opts(conf: cfg.ConfigOpts, group: cfg.OptGroup,
                         service_type: str,
                         interfaces: tuple[str, ...] = ('internal', 'public')
                         ) -> None:
    """Register auth, session and adapter options under ``group``."""
    # A group object of this ConfigOpts' own: keystoneauth registers the
    # options of the configured auth plugin when it loads it, and an
    # OptGroup keeps its options, so a shared one would carry them (a
    # required auth_url, say) into every other ConfigOpts using it.
    conf.register_group(cfg.OptGroup(group.name, title=group.title,
                                     help=group.help))
    ks_loading.register_auth_conf_options(conf, group.name)
    conf.register_opts(_session_and_adapter_opts(service_type, interfaces),
                       group=group)


def list_client_opts(service_type: str,
                     interfaces: tuple[str, ...] = ('internal', 'public')
                     ) -> list[cfg.Opt]:
    """Every keystoneauth option of one group, for the sample config."""
    opts = (ks_loading.get_auth_common_conf_options()
            + ks_loading.get_auth_plugin_conf_options('password')
            + _session_and_adapter_opts(service_type, interfaces))
    seen: dict[str, cfg.Opt] = {}
    for opt in opts:
        seen.setdefault(opt.dest, opt)
    return list(seen.values())
