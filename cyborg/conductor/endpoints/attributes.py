"""RPC endpoint of deployables' attributes: the API's writes (1.1)."""
from cyborg.conductor.endpoints import TARGET
from cyborg.conductor.endpoints import expose
from cyborg.db.api import attributes


class AttributeEndpoint:
    """Each method is the database function that does the work."""

    target = TARGET

    attribute_create = staticmethod(expose(attributes.create))
    attribute_delete = staticmethod(expose(attributes.delete))
