"""Capacity rows as stacked bars: the segments' widths, in percent."""
from typing import Any

# The segments of a bar, in order; together they make the total.
SEGMENTS = ('used', 'reserved', 'unhealthy', 'available')


def bars(rows: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """One bar per row, labelled by ``key``: each segment's count and
    width in percent of the largest total, so bars of one chart compare
    (a host with half the accelerators of the largest gets half a bar)."""
    largest = max((row['total'] for row in rows), default=0)
    found = []
    for row in rows:
        segments = [
            {'name': name, 'count': row[name],
             'width': round(100.0 * row[name] / largest, 2)
             if largest else 0.0}
            for name in SEGMENTS]
        found.append({'label': row.get(key), 'total': row['total'],
                      'segments': segments})
    return found
