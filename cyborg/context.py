"""The request context carried through API, RPC and the database layer."""
from typing import Any

from oslo_context import context as oslo_context


class RequestContext(oslo_context.RequestContext):
    """A security context that also carries the current DB transaction.

    ``cyborg.db.api`` makes the class carry oslo.db's transaction when it
    is imported, so the processes that never touch the database (agents,
    nova-compute through os_acc) do not load SQLAlchemy for it.
    """

    # Set by oslo.db's reader/writer for the length of a transaction: the
    # SQLAlchemy session.
    session: Any
    # Set by ``rpc.call`` on the copy it sends: the time it sends the call
    # plus the call's timeout (``cyborg.common.rpc_deadline``). Sent with
    # the call, never read back into a context, so nothing a server passes
    # on inherits it.
    rpc_deadline: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return super().to_dict()

    @classmethod
    def from_dict(cls, values: dict[str, Any],
                  **kwargs: Any) -> 'RequestContext':
        return super().from_dict(values, **kwargs)


def get_admin_context() -> RequestContext:
    """A context for the services' own work (not tied to a user)."""
    return RequestContext(is_admin=True, overwrite=False)
