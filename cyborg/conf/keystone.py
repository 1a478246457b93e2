"""keystoneauth options shared by the groups of the services cyborg calls."""
import copy

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg


def register_client_opts(conf: cfg.ConfigOpts, group: cfg.OptGroup,
                         service_type: str,
                         interfaces: tuple[str, ...] = ('internal', 'public')
                         ) -> None:
    """Register auth, session and adapter options under ``group``."""
    conf.register_group(group)
    ks_loading.register_session_conf_options(conf, group.name)
    ks_loading.register_auth_conf_options(conf, group.name)
    ks_loading.register_adapter_conf_options(conf, group.name)
    conf.set_default('service_type', service_type, group=group.name)
    conf.set_default('valid_interfaces', list(interfaces), group=group.name)


def list_client_opts(service_type: str) -> list[cfg.Opt]:
    """Every keystoneauth option of one group, for the sample config."""
    opts = (ks_loading.get_session_conf_options()
            + ks_loading.get_auth_common_conf_options()
            + ks_loading.get_auth_plugin_conf_options('password')
            + ks_loading.get_adapter_conf_options(include_deprecated=False))
    seen: dict[str, cfg.Opt] = {}
    for opt in opts:
        if opt.dest == 'service_type':
            opt = _with_default(opt, service_type)
        seen.setdefault(opt.dest, opt)
    return list(seen.values())


def _with_default(opt: cfg.Opt, default: str) -> cfg.Opt:
    opt = copy.deepcopy(opt)
    opt.default = default
    return opt
