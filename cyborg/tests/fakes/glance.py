"""A fake Glance image API v2: image metadata, property filters, downloads.

It serves what the agent reads: ``GET /v2/images/{id}``,
``GET /v2/images`` (filters on status, name, visibility and custom
properties given as query parameters, ``limit``/``marker`` paging with a
``next`` link) and ``GET /v2/images/{id}/file``. Every request needs the
fake's token. A test can make the next downloads fail, hang up half way or
send corrupted data.
"""
import collections
import datetime
import hashlib
import urllib.parse
import uuid
from typing import Any

from cyborg.tests.fakes import http

_PREFIX = '/v2/images'
# Query parameters of the image list that are not property filters.
_LIST_PARAMS = ('limit', 'marker', 'sort_key', 'sort_dir', 'sort')
_DEFAULT_LIMIT = 25
# What a download can be told to do instead of serving the data.
CORRUPT = 'corrupt'
HANG_UP = 'hang-up'


class FakeGlance(http.FakeHTTPServer):
    """Glance's image API on ``url`` (the endpoint, unversioned)."""

    def __init__(self, token: str = 'glance-admin-token',
                 chunk_size: int = 64 * 1024) -> None:
        super().__init__()
        self.token = token
        self.chunk_size = chunk_size
        self._images: dict[str, dict[str, Any]] = {}
        self._data: dict[str, bytes] = {}
        # One entry per download to spoil: a status, CORRUPT or HANG_UP.
        self._download_faults: collections.deque[int | str] = (
            collections.deque())
        self.route('GET', _PREFIX, self._get)

    @property
    def endpoint(self) -> str:
        """The image endpoint, as the service catalog would give it."""
        return self.url

    # -- set-up ------------------------------------------------------------

    def add_image(self, data: bytes | None = b'', *,
                  image_id: str | None = None, name: str | None = None,
                  status: str = 'active',
                  properties: dict[str, str] | None = None,
                  multihash: bool = True, md5: bool = True
                  ) -> dict[str, Any]:
        """Store an image and return its document.

        ``data`` None is an image without data (``queued``). Without
        ``multihash`` the image has no ``os_hash_*`` (as images uploaded
        before Rocky), without ``md5`` no ``checksum`` either.
        """
        image_id = image_id or str(uuid.uuid4())
        now = datetime.datetime.now(datetime.timezone.utc).strftime(
            '%Y-%m-%dT%H:%M:%SZ')
        has_data = data is not None
        image: dict[str, Any] = {
            'id': image_id,
            'name': name,
            'status': status if has_data else 'queued',
            'visibility': 'shared',
            'protected': False,
            'os_hidden': False,
            'owner': 'service',
            'tags': [],
            'container_format': 'bare',
            'disk_format': 'raw',
            'min_disk': 0,
            'min_ram': 0,
            'size': len(data) if has_data else None,
            'virtual_size': None,
            'checksum': (hashlib.md5(data, usedforsecurity=False).hexdigest()
                         if has_data and md5 else None),
            'os_hash_algo': 'sha512' if has_data and multihash else None,
            'os_hash_value': (hashlib.sha512(data).hexdigest()
                              if has_data and multihash else None),
            'created_at': now,
            'updated_at': now,
            'self': f'{_PREFIX}/{image_id}',
            'file': f'{_PREFIX}/{image_id}/file',
            'schema': '/v2/schemas/image',
        }
        image.update({k: str(v) for k, v in (properties or {}).items()})
        with self._lock:
            self._images[image_id] = image
            if has_data:
                self._data[image_id] = data
        return dict(image)

    def remove_image(self, image_id: str) -> None:
        with self._lock:
            self._images.pop(image_id, None)
            self._data.pop(image_id, None)

    def corrupt_next_download(self, count: int = 1) -> None:
        """Serve the next ``count`` downloads with one byte changed (same
        length, so only a hash notices)."""
        with self._lock:
            self._download_faults.extend([CORRUPT] * count)

    def fail_next_download(self, count: int = 1,
                           status: int | None = 503) -> None:
        """Answer the next ``count`` downloads with ``status``, or with
        ``None`` send half the data and hang up."""
        with self._lock:
            self._download_faults.extend(
                [HANG_UP if status is None else status] * count)

    # -- what was received -------------------------------------------------

    def downloads(self) -> list[http.Request]:
        """Every download request, answered or not, oldest first."""
        return [r for r in self.requests_to('GET', _PREFIX)
                if r.path.endswith('/file')]

    # -- serving -----------------------------------------------------------

    def _get(self, request: http.Request) -> http.Response:
        if request.headers.get('x-auth-token') != self.token:
            return _error(401, 'This server could not verify that you are '
                               'authorized to access the document you '
                               'requested.')
        parts = request.path.rstrip('/').split('/')[3:]
        if not parts:
            return self._list(request)
        with self._lock:
            image = self._images.get(parts[0])
        if image is None or len(parts) > 2 or parts[1:] not in ([],
                                                                ['file']):
            return _error(404, f'No image found with ID {parts[0]}')
        if parts[1:] == ['file']:
            return self._download(parts[0])
        return http.json_response(image)

    def _list(self, request: http.Request) -> http.Response:
        query = {k: v[-1] for k, v in request.query.items()}
        try:
            limit = int(query.get('limit', _DEFAULT_LIMIT))
        except ValueError:
            return _error(400, 'limit param must be an integer')
        filters = {k: v for k, v in query.items() if k not in _LIST_PARAMS}
        with self._lock:
            images = sorted(self._images.values(),
                            key=lambda i: (i['created_at'], i['id']),
                            reverse=True)
        images = [i for i in images
                  if all(str(i.get(k)) == v for k, v in filters.items())]
        marker = query.get('marker')
        if marker is not None:
            ids = [i['id'] for i in images]
            if marker not in ids:
                return _error(400, f'marker {marker} not found')
            images = images[ids.index(marker) + 1:]
        page = images[:limit]
        body: dict[str, Any] = {'images': page, 'first': _PREFIX,
                                'schema': '/v2/schemas/images'}
        if len(page) == limit and len(images) > limit:
            rest = {k: v for k, v in query.items() if k != 'marker'}
            rest['marker'] = page[-1]['id']
            body['next'] = f'{_PREFIX}?{urllib.parse.urlencode(rest)}'
        return http.json_response(body)

    def _download(self, image_id: str) -> http.Response:
        with self._lock:
            data = self._data.get(image_id)
            checksum = self._images[image_id]['checksum']
            fault = (self._download_faults.popleft()
                     if self._download_faults else None)
        if data is None:
            return http.Response(204)
        if isinstance(fault, int):
            return _error(fault, 'Injected fault')
        headers = {'Content-MD5': checksum} if checksum else {}
        if fault == CORRUPT and data:
            middle = len(data) // 2
            data = (data[:middle] + bytes([data[middle] ^ 0xff])
                    + data[middle + 1:])
        chunks = [data[i:i + self.chunk_size]
                  for i in range(0, len(data), self.chunk_size)]
        if fault == HANG_UP:
            # Content-Length promises everything; the connection ends at
            # half of it.
            chunks = [data[:len(data) // 2]]
        return http.stream_response(chunks, length=len(data),
                                    headers=headers)


def _error(status: int, message: str) -> http.Response:
    title = {400: 'Bad Request', 401: 'Unauthorized', 404: 'Not Found',
             500: 'Internal Server Error',
             503: 'Service Unavailable'}.get(status, 'Error')
    # Plain text: a client must not depend on the body of an error.
    return http.Response(status, {'Content-Type': 'text/plain'},
                         f'{status} {title}\n\n{message}\n\n'.encode())
