"""The forms of a device: its layout, and an operator's health."""
from typing import Any

from django import forms as django_forms
from django import urls
from django.contrib import messages
from django.utils.translation import gettext_lazy as _
from horizon import forms

from cyborg.dashboard import api
from cyborg.dashboard.admin import common

# The type of each layout key (cyborg.common.device_layout.LAYOUT_KEYS,
# restated: the dashboard may run without cyborg's server packages).
LAYOUT_TYPES: dict[str, type] = {
    'vf_count': int, 'mdev_type': str, 'mdev_count': int,
    'region_image': str, 'vgpu_type': str, 'vgpu_count': int,
    'mig_mode': str, 'mig_partition': list, 'eswitch_mode': str}


def _list(value: str) -> list[str]:
    return [item.strip() for item in value.split(',') if item.strip()]


def layout_field(key: str, offer: dict[str, Any]) -> django_forms.Field:
    """The field for one key of the options the device's agent reports
    (``AcceleratorDriver.layout_options``): a range, names to choose
    from, an image id, MIG profiles, or a key offered once another is
    applied. Every field is optional: a key left out keeps what the
    device has."""
    label = key.replace('_', ' ').capitalize()
    if 'min' in offer and 'max' in offer:
        return forms.IntegerField(
            label=label, required=False, min_value=offer['min'],
            max_value=offer['max'],
            help_text=_('From %(min)s to %(max)s.') % offer)
    if 'deployables' in offer:
        return forms.CharField(
            label=label, required=False, max_length=255,
            help_text=_('The Glance image to load into %s.')
            % ', '.join(offer['deployables']))
    if 'profiles' in offer:
        allowed = ', '.join(f'{name} (at most {count})'
                            for name, count in sorted(
                                offer['profiles'].items()))
        return forms.CharField(
            label=label, required=False,
            help_text=_('Comma-separated profiles of: %s.') % allowed)
    if 'after' in offer:
        later = (forms.IntegerField if LAYOUT_TYPES.get(key) is int
                 else forms.CharField)
        return later(label=label, required=False, help_text=_(
            'Offered once %s is applied: set it in the same layout.')
            % ' or '.join(offer['after']))
    # Names to choose from, with how many instances each gives.
    choices = [('', _('(keep)'))] + [
        (name, f'{name} ({count})' if isinstance(count, int) else name)
        for name, count in sorted(offer.items())]
    return forms.ChoiceField(label=label, required=False, choices=choices)


class LayoutForm(forms.SelfHandlingForm):
    """``PUT /devices/{uuid}/layout`` with the keys given; the agent
    applies it before the API answers, or the API says why not."""

    def __init__(self, request: Any, *args: Any, **kwargs: Any) -> None:
        self.uuid = kwargs.pop('uuid')
        options = kwargs.pop('options')
        super().__init__(request, *args, **kwargs)
        for key, offer in sorted(options.items()):
            self.fields[key] = layout_field(key, offer)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        layout: dict[str, Any] = {}
        for key, value in data.items():
            if value is None or value == '':
                continue
            if LAYOUT_TYPES.get(key) is list:
                value = _list(value)
            layout[key] = value
        if not layout:
            raise django_forms.ValidationError(
                _('Set at least one of the keys.'))
        self.layout = layout
        return data

    def handle(self, request: Any, data: dict[str, Any]) -> Any:
        try:
            device = api.device_layout_set(request, self.uuid, self.layout)
        except api.ApiError as exc:
            # In the modal, which stays open: a message queued with
            # django.contrib.messages would wait for the next page.
            self.api_error(exc.message)
            return False
        messages.success(
            request, _('Layout %(layout)s: %(state)s.') % {
                'layout': self.layout,
                'state': device.get('layout_state') or _('set')})
        return device


class HealthForm(forms.SelfHandlingForm):
    """The operator's health, standing over the agent's readings until
    cleared (``PUT /devices/{uuid}/health``)."""
    health = forms.ChoiceField(label=_('Health'),
                               choices=common.HEALTH_CHOICES)
    reason = forms.CharField(label=_('Reason'), required=False,
                             max_length=255)

    def __init__(self, request: Any, *args: Any, **kwargs: Any) -> None:
        self.uuid = kwargs.pop('uuid')
        super().__init__(request, *args, **kwargs)

    def handle(self, request: Any, data: dict[str, Any]) -> Any:
        try:
            device = api.device_health_set(request, self.uuid,
                                           data['health'], data['reason'])
        except api.ApiError as exc:
            # In the modal, which stays open: a message queued with
            # django.contrib.messages would wait for the next page.
            self.api_error(exc.message)
            return False
        messages.success(request, _(
            'Health of %(uuid)s set to %(health)s.') % {
                'uuid': self.uuid, 'health': device.get('health')})
        return device


def detail_url(uuid: str) -> str:
    return urls.reverse('horizon:admin:accelerator_devices:detail',
                        args=[uuid])
