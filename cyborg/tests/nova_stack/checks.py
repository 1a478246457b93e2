"""What must hold between Nova, cyborg and placement after every scenario.

No accelerator request without a live instance, no attach handle in use
without a Bound request holding it, and on every device's provider
placement's usage equal to the Bound requests on it.
"""
import collections
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from cyborg.db import models

ARQ = models.AcceleratorRequest
AH = models.AttachHandle
Dep = models.Deployable


def problems(engine: sa.engine.Engine, servers: set[str],
             usages: Callable[[str], dict[str, int]]) -> list[str]:
    """What breaks the invariants; ``servers``: the uuids of Nova's live
    instances, ``usages``: placement's usages of a provider."""
    found = []
    with engine.connect() as conn:
        arqs = conn.execute(sa.select(
            ARQ.uuid, ARQ.state, ARQ.instance_uuid, ARQ.attach_handle_id,
            ARQ.device_rp_uuid)).all()
        handles = conn.execute(sa.select(AH.id, AH.uuid, AH.in_use)).all()
        rps = [rp for (rp,) in conn.execute(
            sa.select(Dep.rp_uuid).where(Dep.rp_uuid.is_not(None)))]
    for arq in arqs:
        if arq.instance_uuid not in servers:
            found.append(f'request {arq.uuid} ({arq.state}) belongs to no '
                         f'instance: {arq.instance_uuid}')
    held = {arq.attach_handle_id for arq in arqs if arq.state == 'Bound'}
    found += [f'attach handle {h.uuid} is in use without a Bound request'
              for h in handles if h.in_use and h.id not in held]
    bound = collections.Counter(arq.device_rp_uuid for arq in arqs
                                if arq.state == 'Bound')
    for rp in rps:
        used = sum(usages(rp).values())
        if used != bound.get(rp, 0):
            found.append(f'provider {rp}: placement uses {used}, '
                         f'{bound.get(rp, 0)} Bound request(s)')
    return found


def arqs_of(engine: sa.engine.Engine, instance: str) -> list[dict[str, Any]]:
    """The requests of ``instance`` as rows of cyborg's database."""
    with engine.connect() as conn:
        return [dict(row._mapping) for row in conn.execute(
            sa.select(ARQ.uuid, ARQ.state, ARQ.hostname, ARQ.device_rp_uuid,
                      ARQ.attach_handle_id, ARQ.project_id).where(
                ARQ.instance_uuid == instance))]


def handles_in_use(engine: sa.engine.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(
            AH).where(AH.in_use.is_(True))).scalar_one())


def handle_in_use(engine: sa.engine.Engine, handle_id: int) -> bool:
    with engine.connect() as conn:
        return bool(conn.execute(sa.select(AH.in_use).where(
            AH.id == handle_id)).scalar_one())
