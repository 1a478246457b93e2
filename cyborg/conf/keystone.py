"""The groups of the services cyborg calls, with keystoneauth's options."""
import copy
from collections.abc import Sequence

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

from cyborg.conf import groups

# Seconds before a request to another service is abandoned: a hung peer
# must not hold a conductor thread forever.
TIMEOUT = 30
# The endpoints of the catalog cyborg calls, in order of preference.
INTERFACES = ('internal', 'public')


def _session_and_adapter_opts(service_type: str) -> list[cfg.Opt]:
    # Copies with cyborg's defaults. Defaults are part of the options
    # rather than set with set_default(), which ConfigOpts.reset() undoes.
    defaults = {'service_type': service_type,
                'valid_interfaces': list(INTERFACES), 'timeout': TIMEOUT}
    opts = []
    for opt in (ks_loading.get_session_conf_options()
                + ks_loading.get_adapter_conf_options(
                    include_deprecated=False)):
        if opt.dest in defaults:
            opt = copy.deepcopy(opt)
            opt.default = defaults[opt.dest]
        opts.append(opt)
    return opts


class ServiceClientGroup(groups.Group):
    """The group of a service cyborg calls: its own options, then the
    keystoneauth auth, session and adapter options of ``service_type``."""

    def __init__(self, name: str, title: str, help: str,
                 opts: Sequence[cfg.Opt], service_type: str) -> None:
        super().__init__(name, title, help, opts)
        self.service_type = service_type

    def register_opts(self, conf: cfg.ConfigOpts) -> None:
        # A group object of this ConfigOpts' own: keystoneauth registers the
        # options of the configured auth plugin when it loads it, and an
        # OptGroup keeps its options, so a shared one would carry them (a
        # required auth_url, say) into every other ConfigOpts using it.
        conf.register_group(cfg.OptGroup(self.group.name,
                                         title=self.group.title,
                                         help=self.group.help))
        ks_loading.register_auth_conf_options(conf, self.group.name)
        conf.register_opts(_session_and_adapter_opts(self.service_type),
                           group=self.group)
        conf.register_opts(self.opts, group=self.group)

    def list_opts(self) -> dict[cfg.OptGroup, list[cfg.Opt]]:
        """Every option of the group, the auth ones of the password
        plugin included, for the sample config."""
        client_opts = (ks_loading.get_auth_common_conf_options()
                       + ks_loading.get_auth_plugin_conf_options('password')
                       + _session_and_adapter_opts(self.service_type))
        seen: dict[str, cfg.Opt] = {}
        for opt in client_opts:
            seen.setdefault(opt.dest, opt)
        return {self.group: self.opts + list(seen.values())}
