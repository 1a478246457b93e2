"""What the Project panels share: paging by the API's marker, and the
table rows as the API's dicts."""
from typing import Any
from urllib import parse

from cyborg.dashboard import api


class ApiRowsMixin:
    """A DataTable whose rows are the API's documents, keyed by uuid, and
    whose "next" link carries the API's own marker (``next_marker``, set
    by the view): the API says where the next page starts, the table does
    not work it out from the last row."""

    next_marker: str | None = None

    def get_object_id(self, datum: dict[str, Any]) -> str:
        return datum['uuid']

    def get_marker(self) -> str:
        return parse.quote_plus(self.next_marker or '')


class MarkerPagedViewMixin:
    """A DataTableView over one ``api.Page``: remembers its next marker
    and hands it to the table."""

    _next_marker: str | None = None

    def marker(self) -> str | None:
        table = self.table_class  # type: ignore[attr-defined]
        return self.request.GET.get(  # type: ignore[attr-defined]
            table._meta.pagination_param) or None

    def page_items(self, page: api.Page) -> list[dict[str, Any]]:
        self._next_marker = page.next_marker
        return page.items

    def has_more_data(self, table: Any) -> bool:
        table.next_marker = self._next_marker
        return self._next_marker is not None

    def server_filter(self) -> str | None:
        """The server-side filter's value (None when empty)."""
        info = self.get_server_filter_info(  # type: ignore[attr-defined]
            self.request)  # type: ignore[attr-defined]
        value = (info or {}).get('value') or ''
        return value.strip() or None
