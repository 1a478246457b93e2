"""The form that creates a device profile, and the reading of its groups.

Groups are typed either as JSON (the list the API takes) or as text: one
group per block, blocks separated by a blank line, one ``key=value`` a
line. Either way they are checked before anything is sent, so that a typo
is named next to the field; what only the API knows (resource classes a
deployment has, its limits) it says itself, and the form shows it as the
API words it.
"""
import json
import re
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _
from horizon import forms as horizon_forms
from horizon import messages

from cyborg.dashboard import api

# The API's own rules (cyborg/api/schemas/device_profiles.py): a name of
# letters, digits, "_" and "-"; resources as positive integers; traits
# required or forbidden.
NAME_RE = re.compile(r'[a-zA-Z0-9_-]+')
COUNT_RE = re.compile(r'[0-9]+')
TRAIT_VALUES = ('required', 'forbidden')
PREFIXES = ('resources', 'trait', 'accel')


def _parse_text(text: str) -> list[dict[str, Any]]:
    """Blocks of ``key=value`` lines; ``#`` starts a comment line."""
    groups: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            current = None
            continue
        if line.startswith('#'):
            continue
        key, sep, value = line.partition('=')
        if not sep:
            raise ValidationError(
                _('Line %(n)d: write key=value, e.g. resources:FPGA=1.'),
                params={'n': number})
        if current is None:
            current = {}
            groups.append(current)
        key = key.strip()
        if key in current:
            raise ValidationError(
                _('Line %(n)d: %(key)s appears twice in its group.'),
                params={'n': number, 'key': key})
        current[key] = value.strip()
    return groups


def _parse_json(text: str) -> list[dict[str, Any]]:
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ValidationError(_('The groups are not JSON: %(error)s'),
                              params={'error': exc}) from exc
    if not isinstance(document, list) or not all(
            isinstance(g, dict) for g in document):
        raise ValidationError(
            _('In JSON, the groups are a list of objects, e.g. '
              '[{"resources:FPGA": "1"}].'))
    return document


def _check_group(index: int, group: dict[str, Any]) -> dict[str, str]:
    result: dict[str, str] = {}
    where = _('Group %d') % (index + 1)
    for key, value in group.items():
        prefix, sep, name = str(key).partition(':')
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise ValidationError(
                _('%(where)s: the value of %(key)s is a string.'),
                params={'where': where, 'key': key})
        value = str(value).strip()
        if not sep or prefix not in PREFIXES or not name.strip():
            raise ValidationError(
                _('%(where)s: unknown key %(key)s; keys are '
                  'resources:<CLASS>, trait:<TRAIT> or accel:<name>.'),
                params={'where': where, 'key': key})
        if prefix == 'resources' and (not COUNT_RE.fullmatch(value)
                                      or int(value) < 1):
            raise ValidationError(
                _('%(where)s: %(key)s is a positive whole number, not '
                  '"%(value)s".'),
                params={'where': where, 'key': key, 'value': value})
        if prefix == 'trait' and value not in TRAIT_VALUES:
            raise ValidationError(
                _('%(where)s: %(key)s is "required" or "forbidden", not '
                  '"%(value)s".'),
                params={'where': where, 'key': key, 'value': value})
        result[str(key)] = value
    if not any(k.startswith('resources:') for k in result):
        raise ValidationError(
            _('%(where)s asks for no resource: add a resources:<CLASS> '
              'line.'), params={'where': where})
    return result


def parse_groups(text: str) -> list[dict[str, str]]:
    """The request groups typed in ``text``, as the API takes them
    (string values), or ValidationError saying what is wrong."""
    text = text.strip()
    groups = _parse_json(text) if text.startswith('[') else _parse_text(text)
    if not groups:
        raise ValidationError(_('A device profile needs at least one '
                                'group.'))
    return [_check_group(i, g) for i, g in enumerate(groups)]


class CreateProfileForm(horizon_forms.SelfHandlingForm):
    name = forms.CharField(
        label=_('Name'), max_length=255,
        help_text=_('Letters, digits, "_" and "-"; flavors name it in '
                    'accel:device_profile.'))
    description = forms.CharField(
        label=_('Description'), required=False,
        widget=forms.Textarea(attrs={'rows': 2}))
    groups = forms.CharField(
        label=_('Groups'),
        widget=forms.Textarea(attrs={
            'rows': 8,
            'placeholder': 'resources:FPGA=1\n'
                           'trait:CUSTOM_FAKE_DEVICE=required\n\n'
                           'resources:FPGA=1'}),
        help_text=_('One group per block of key=value lines, blocks '
                    'separated by an empty line; or the JSON list of '
                    'objects the API takes.'))
    is_public = forms.BooleanField(
        label=_('Public'), required=False, initial=True,
        help_text=_('Every project may use a public profile; a private '
                    'one only the projects an administrator adds.'))

    def clean_name(self) -> str:
        name = self.cleaned_data['name'].strip()
        if not NAME_RE.fullmatch(name):
            raise ValidationError(_('Use letters, digits, "_" and "-" '
                                    'only.'))
        return name

    def clean_groups(self) -> list[dict[str, str]]:
        return parse_groups(self.cleaned_data['groups'])

    def handle(self, request: Any, data: dict[str, Any]) -> Any:
        try:
            created = api.device_profile_create(
                request, data['name'], data['groups'],
                description=data['description'] or None,
                is_public=data['is_public'])
        except api.ApiError as exc:
            # In the form, above its fields, as the API words it: the
            # user corrects what they typed and sends again.
            self.api_error(exc.message)
            return False
        messages.success(request, _('Created device profile "%s".')
                         % created['name'])
        return created
