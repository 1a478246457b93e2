"""keystoneauth adapters for the services cyborg calls, from their groups."""
from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import loading as ks_loading
from oslo_config import cfg


def get_adapter(conf: cfg.ConfigOpts, group: str,
                **kwargs: object) -> ks_adapter.Adapter:
    """An Adapter built from the auth, session and adapter options of
    ``group``; ``kwargs`` override adapter options (e.g. a fixed
    microversion is better passed per call)."""
    auth = ks_loading.load_auth_from_conf_options(conf, group)
    session = ks_loading.load_session_from_conf_options(conf, group,
                                                        auth=auth)
    return ks_loading.load_adapter_from_conf_options(
        conf, group, session=session, auth=auth, **kwargs)
