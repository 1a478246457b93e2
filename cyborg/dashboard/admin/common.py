"""What the admin panels share: health badges and actions that call the
API once and show its answer (a refusal as the API words it,
``errors.show``)."""
from collections.abc import Callable
from typing import Any

from django import shortcuts
from django.contrib import messages
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from horizon import tables

from cyborg.dashboard import api
from cyborg.dashboard import conf
from cyborg.dashboard import errors

# A device's health (cyborg.common.device_health.HEALTH_STATES) and the
# badge colour it gets: green, amber, red, grey.
HEALTH_CLASSES = {'healthy': 'healthy', 'degraded': 'reserved',
                  'unhealthy': 'unhealthy', 'unknown': 'unknown'}
HEALTH_CHOICES = (('healthy', _('Healthy')), ('degraded', _('Degraded')),
                  ('unhealthy', _('Unhealthy')), ('unknown', _('Unknown')))


def rule(name: str) -> tuple[tuple[str, str], ...]:
    """``policy_rules`` for one of cyborg's rules, e.g. ``device:get_all``."""
    return ((conf.SERVICE, f'cyborg:{name}'),)


def badge(colour: str, text: str, title: str | None = None) -> str:
    return format_html('<span class="cyborg-health cyborg-health-{}" '
                       'title="{}">{}</span>', colour, title or '', text)


def device_health(device: dict[str, Any]) -> str:
    """A device's health as a coloured badge, its reason as the title."""
    health = device.get('health') or 'unknown'
    return badge(HEALTH_CLASSES.get(health, 'unknown'), health,
                 device.get('health_reason'))


def capacity_health(row: dict[str, Any]) -> str:
    """A capacity row's colour: red while any accelerator is unhealthy,
    amber while any is reserved (cleaning, maintenance), green else."""
    if row['unhealthy'] > 0:
        return badge('unhealthy', _('%d unhealthy') % row['unhealthy'])
    if row['reserved'] > 0:
        return badge('reserved', _('%d reserved') % row['reserved'])
    return badge('healthy', _('All healthy'))


class ApiAction(tables.Action):
    """One API call for a row (or, with ``requires_input`` False, for the
    table), then back to the page with the API's answer as a message.

    Subclasses set ``call(table, request, obj_id)`` and ``success``, a
    format string of the row's id. The call needs the id only, not the
    row: a device's page posts its actions to the list, where the device
    may be on another page.
    """
    success = _('Done: %s')

    def call(self, table: tables.DataTable, request: Any,
             obj_id: str | None) -> Any:
        raise NotImplementedError

    def single(self, table: tables.DataTable, request: Any,
               obj_id: str | None) -> Any:
        try:
            self.call(table, request, obj_id)
        except api.ApiError as exc:
            errors.show(request, exc)
        else:
            messages.success(request, self.success % (obj_id or ''))
        return shortcuts.redirect(request.get_full_path())


def loaded(request: Any, fetch: Callable[[], Any], default: Any) -> Any:
    """``fetch()``, or ``default`` with the API's message shown."""
    try:
        return fetch()
    except api.ApiError as exc:
        errors.show(request, exc)
        return default
