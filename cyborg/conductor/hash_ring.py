"""A consistent hash ring: which one of a set of members owns a key; the
ring of the live conductors, which shares their periodic work."""
import bisect
import hashlib
from collections.abc import Iterable

from oslo_config import cfg

from cyborg import context as cyborg_context
from cyborg.db.api import services

# Points each member has on the ring. With 256, each of three members
# owns 31 % to 37 % of 10,000 host names (64 points: 27 % to 40 %), and a
# member that leaves or joins moves only its own share of the keys, where
# a modulo of the member count would move about two thirds.
POINTS = 256


def _point(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8],
                          'big')


class HashRing:
    """The members, each at ``points`` places on a ring of 64-bit
    hashes; a key belongs to the first member at or after its hash."""

    def __init__(self, members: Iterable[str], points: int = POINTS
                 ) -> None:
        ring = sorted((_point(f'{member}#{index}'), member)
                      for member in set(members) for index in range(points))
        if not ring:
            raise ValueError('A hash ring needs at least one member.')
        self._points = [point for point, _ in ring]
        self._members = [member for _, member in ring]

    @property
    def members(self) -> list[str]:
        """The members, sorted."""
        return sorted(set(self._members))

    def owner(self, key: str) -> str:
        """The member that owns ``key``."""
        index = bisect.bisect_left(self._points, _point(key))
        return self._members[index % len(self._members)]


def live_conductors(context: cyborg_context.RequestContext,
                    conf: cfg.ConfigOpts) -> HashRing:
    """The ring of the live conductors (a heartbeat within
    ``service_down_time``): each key of a periodic task's work is done
    by the one that owns it, not once per conductor, and a stopped
    conductor's keys go to the others at their next pass after its
    heartbeat goes stale. This conductor counts itself live (its first
    heartbeat may not be written yet): a key may then be done twice for
    a pass, never not at all."""
    return HashRing({conf.host, *services.alive_hosts(
        context, 'cyborg-conductor', conf.service_down_time)})
