"""Reading an instance's resolved accelerator requests from Cyborg's API.

The caller gives the keystoneauth Adapter, or the session (and endpoint)
to build one from, or a ConfigOpts holding keystoneauth options in a group
(Nova's ``[cyborg]``, or ``[os_acc]`` after :func:`register_opts`): this
module reads no configuration of its own.
"""
import logging
from typing import Any

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import exceptions as ks_exceptions
from keystoneauth1 import loading as ks_loading
from keystoneauth1 import session as ks_session
from oslo_config import cfg

from cyborg.os_acc import exception

LOG = logging.getLogger(__name__)

SERVICE_TYPE = 'accelerator'
ARQS = '/accelerator_requests'
# What the API answers while some of the instance's requests are still
# being bound.
_LOCKED = 423


def register_opts(conf: cfg.ConfigOpts, group: str = 'os_acc') -> None:
    """Register keystoneauth's auth, session and adapter options in
    ``group`` of ``conf``, the service type defaulting to Cyborg's."""
    ks_loading.register_auth_conf_options(conf, group)
    ks_loading.register_session_conf_options(conf, group)
    ks_loading.register_adapter_conf_options(conf, group)
    conf.set_default('service_type', SERVICE_TYPE, group=group)


class Client:
    """Cyborg's accelerator requests, read through ``adapter``."""

    def __init__(self, adapter: ks_adapter.Adapter) -> None:
        self.adapter = adapter

    @classmethod
    def from_session(cls, session: ks_session.Session,
                     endpoint_override: str | None = None,
                     interface: str | None = None,
                     region_name: str | None = None) -> 'Client':
        """A client of the accelerator service of ``session``'s catalog,
        or of ``endpoint_override`` (``http://cyborg:6666/v2``)."""
        return cls(ks_adapter.Adapter(
            session, service_type=SERVICE_TYPE, interface=interface,
            region_name=region_name, endpoint_override=endpoint_override))

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts, group: str = 'cyborg'
                  ) -> 'Client':
        """A client configured by the keystoneauth options of ``group`` in
        ``conf``, which the caller has registered and parsed."""
        auth = ks_loading.load_auth_from_conf_options(conf, group)
        session = ks_loading.load_session_from_conf_options(conf, group,
                                                            auth=auth)
        adapter = ks_loading.load_adapter_from_conf_options(
            conf, group, session=session, auth=auth)
        if not adapter.service_type:
            adapter.service_type = SERVICE_TYPE
        return cls(adapter)

    def resolved_arqs(self, instance_uuid: str) -> list[dict[str, Any]]:
        """The instance's accelerator requests once none is still being
        bound, as the API returns them; FetchFailed otherwise."""
        try:
            response = self.adapter.get(
                ARQS, params={'instance': instance_uuid,
                              'bind_state': 'resolved'},
                raise_exc=True)
        except ks_exceptions.HttpError as exc:
            reason = (f'some are still being bound ({exc.http_status})'
                      if exc.http_status == _LOCKED else str(exc))
            raise exception.FetchFailed(instance=instance_uuid,
                                        reason=reason) from exc
        except ks_exceptions.ClientException as exc:
            raise exception.FetchFailed(instance=instance_uuid,
                                        reason=str(exc)) from exc
        try:
            arqs = response.json()['arqs']
        except (ValueError, KeyError, TypeError) as exc:
            raise exception.FetchFailed(
                instance=instance_uuid,
                reason=f'the answer is not a list of requests: {exc}'
            ) from exc
        if not isinstance(arqs, list):
            raise exception.FetchFailed(
                instance=instance_uuid,
                reason='the answer is not a list of requests')
        LOG.debug('Instance %s has %d resolved accelerator request(s)',
                  instance_uuid, len(arqs))
        return arqs
