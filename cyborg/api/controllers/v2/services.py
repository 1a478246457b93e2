"""/v2/services (microversion 2.5): the conductors and agents, up or down."""
from pecan import rest
from wsme import types as wtypes

from cyborg.api.controllers import base
from cyborg.api.expose import expose
from cyborg.db import models
from cyborg.db.api import services


class Service(base.Resource):
    """A conductor or an agent, as its heartbeats describe it."""

    # Services have no uuid; ``id`` is the marker of the next page.
    id = int
    host = wtypes.text
    binary = wtypes.text
    hostname = wtypes.text
    version = wtypes.text
    # ``down`` once no heartbeat came for [DEFAULT] service_down_time.
    state = base.Field(wtypes.text, source='alive', convert=base.up_or_down)
    last_seen_at = base.timestamp_field()
    created_at = base.timestamp_field()


class ServiceCollection(wtypes.Base):
    services = [Service]
    next = wtypes.text


class ServicesController(rest.RestController):

    @expose(ServiceCollection, wtypes.text, wtypes.text, wtypes.text,
            wtypes.text)
    def get_all(self, binary: str | None = None, host: str | None = None,
                limit: str | None = None, marker: str | None = None
                ) -> ServiceCollection:
        ctx = base.authorize('cyborg:service:get_all')
        page = base.Page(limit, marker, id_column=models.Service.id)
        found, more = services.get_page(
            ctx, binary=binary, host=host,
            down_time=base.conf().service_down_time,
            size=page.size, marker=page.marker)
        return page.collection(ServiceCollection, 'services', Service,
                               'services', found, more)
