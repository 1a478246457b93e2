"""Finding FPGA bitstreams in the image service and downloading them."""
import dataclasses
import hashlib
import logging
import os
import tempfile
import threading
import time
from typing import Any

import requests
from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import exceptions as ks_exceptions
from oslo_config import cfg
from oslo_utils import uuidutils

from cyborg.common import exception
from cyborg.common import keystone

LOG = logging.getLogger(__name__)

#: Image properties cyborg reads start with this prefix.
ACCEL_PREFIX = 'accel:'
FUNCTION_ID_PROPERTY = 'accel:function_id'
_CHUNK = 1024 * 1024
# Seconds between two tries of a download: with the 3 retries of
# [glance] download_retries, 6 s of waiting in all, time for an image
# service behind a restarting proxy to come back.
RETRY_DELAY = 2.0
# The answers to a download that keystoneauth tries again.
_SERVER_ERRORS = list(range(500, 600))
# Failures of the data once Glance has answered 200 (cut short, stalled),
# which cyborg tries again itself, as it does data that does not verify.
_BODY_ERRORS = (requests.exceptions.ConnectionError,
                requests.exceptions.ChunkedEncodingError,
                requests.exceptions.Timeout)


@dataclasses.dataclass(frozen=True)
class Bitstream:
    """The parts of a Glance image that describe a bitstream."""

    id: str
    name: str | None = None
    size: int | None = None
    os_hash_algo: str | None = None
    os_hash_value: str | None = None
    #: Legacy MD5 of the data, for images uploaded before multihash.
    checksum: str | None = None
    #: Every ``accel:*`` property of the image, e.g. ``accel:function_id``.
    properties: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def function_id(self) -> str | None:
        return self.properties.get(FUNCTION_ID_PROPERTY)

    @classmethod
    def from_image(cls, image: dict[str, Any]) -> 'Bitstream':
        """From a Glance v2 image document (custom properties are
        top-level keys there)."""
        return cls(
            id=image['id'], name=image.get('name'), size=image.get('size'),
            os_hash_algo=image.get('os_hash_algo'),
            os_hash_value=image.get('os_hash_value'),
            checksum=image.get('checksum'),
            properties={k: str(v) for k, v in image.items()
                        if k.startswith(ACCEL_PREFIX)})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> 'Bitstream':
        return cls(**data)


class _Retry(Exception):
    """The data of one download attempt was cut short or does not verify.
    """


class GlanceClient:
    """Reads image metadata and data from Glance (``[glance]`` options).

    The keystoneauth adapter is made on first use, so that building a
    client costs nothing and a broken ``[glance]`` section only fails the
    calls that need it. Instances are safe to share between threads.
    """

    def __init__(self, conf: cfg.ConfigOpts,
                 retry_delay: float = RETRY_DELAY) -> None:
        self.conf = conf
        #: Seconds between two attempts of a download.
        self.retry_delay = retry_delay
        self._adapter: ks_adapter.Adapter | None = None
        self._lock = threading.Lock()

    @property
    def adapter(self) -> ks_adapter.Adapter:
        if self._adapter is None:
            with self._lock:
                if self._adapter is None:
                    self._adapter = keystone.get_adapter(self.conf, 'glance')
        return self._adapter

    def _get_json(self, url: str, what: str,
                  params: dict[str, str] | None = None) -> dict[str, Any]:
        try:
            resp = self.adapter.get(url, params=params, raise_exc=False)
        except ks_exceptions.MissingAuthPlugin as exc:
            raise exception.BitstreamError(
                what=what, reason='Glance is not configured: [glance] has '
                                  'no auth_type (and no endpoint_override) '
                                  'to find the image service with'
            ) from exc
        except ks_exceptions.ClientException as exc:
            raise exception.BitstreamError(
                what=what, reason=f'cannot reach the image service: {exc}'
            ) from exc
        if resp.status_code == 404:
            raise exception.BitstreamNotFound(what=what)
        if resp.status_code != 200:
            raise exception.BitstreamError(
                what=what, reason=f'the image service answered '
                                  f'{resp.status_code} to GET {url}')
        try:
            return resp.json()
        except ValueError as exc:
            raise exception.BitstreamError(
                what=what, reason='the image service answered with a body '
                                  'that is not JSON') from exc

    def get_image(self, image_id: str) -> Bitstream:
        """The bitstream stored as image ``image_id``."""
        if not uuidutils.is_uuid_like(image_id):
            # Glance ids are UUIDs; anything else would also end up in a
            # URL and a file name.
            raise exception.BitstreamNotFound(what=repr(image_id))
        return Bitstream.from_image(
            self._get_json(f'/v2/images/{image_id}', image_id))

    def find_by_function(self, function_id: str) -> Bitstream:
        """The one active image whose ``accel:function_id`` is
        ``function_id``; BitstreamNotFound if there is none and
        BitstreamError if there are several."""
        what = f'with {FUNCTION_ID_PROPERTY}={function_id}'
        url: str | None = '/v2/images'
        params: dict[str, str] | None = {FUNCTION_ID_PROPERTY: function_id,
                                         'status': 'active'}
        images: list[dict[str, Any]] = []
        while url:
            page = self._get_json(url, what, params)
            images.extend(page.get('images', []))
            # ``next`` is a path that already carries the query.
            url, params = page.get('next'), None
        if not images:
            raise exception.BitstreamNotFound(what=f'{what} (0 images found)')
        if len(images) > 1:
            ids = ', '.join(sorted(i['id'] for i in images))
            raise exception.BitstreamError(
                what=what, reason=f'{len(images)} active images match '
                                  f'({ids}); exactly one is required')
        return Bitstream.from_image(images[0])

    def download(self, bitstream: Bitstream, dest_dir: str) -> str:
        """Make the data of ``bitstream`` a verified file in ``dest_dir``.

        Returns its path. A file already there that verifies is used as
        it is. Connection errors and 5xx answers (by keystoneauth), and
        data cut short or that does not verify (here) are each tried again
        ``[glance] download_retries`` times; BitstreamError says why the
        last attempt failed.
        """
        if not uuidutils.is_uuid_like(bitstream.id):
            raise exception.BitstreamNotFound(what=repr(bitstream.id))
        os.makedirs(dest_dir, mode=0o700, exist_ok=True)
        # An image's data never changes once uploaded: the id names it.
        path = os.path.join(dest_dir, f'{bitstream.id}.bin')
        if os.path.exists(path):
            problem = _verify_file(bitstream, path)
            if problem is None:
                LOG.debug('Bitstream %s is cached at %s', bitstream.id, path)
                return path
            LOG.warning('Cached bitstream %s does not verify (%s); '
                        'downloading it again.', path, problem)
        attempts = self.conf.glance.download_retries + 1
        for attempt in range(1, attempts + 1):
            try:
                self._download_once(bitstream, dest_dir, path)
            except _Retry as exc:
                if attempt == attempts:
                    raise _failed(bitstream.id, attempts, str(exc)) from exc
                LOG.warning('Download of bitstream %s failed (%s); attempt '
                            '%d of %d in %.1fs.', bitstream.id, exc,
                            attempt + 1, attempts, self.retry_delay)
                time.sleep(self.retry_delay)
            else:
                break
        LOG.debug('Downloaded bitstream %s to %s', bitstream.id, path)
        return path

    def _download_once(self, bitstream: Bitstream, dest_dir: str,
                       path: str) -> None:
        url = f'/v2/images/{bitstream.id}/file'
        retries = self.conf.glance.download_retries
        fd, temp_path = tempfile.mkstemp(dir=dest_dir,
                                         prefix=f'.{bitstream.id}.',
                                         suffix='.part')
        try:
            with os.fdopen(fd, 'wb') as out:
                try:
                    # log=False: the body is binary, and large.
                    # keystoneauth tries connection failures and 5xx
                    # answers again; what it gave up on is final.
                    resp = self.adapter.get(
                        url, stream=True, log=False, raise_exc=False,
                        connect_retries=retries,
                        connect_retry_delay=self.retry_delay,
                        status_code_retries=retries,
                        status_code_retry_delay=self.retry_delay,
                        retriable_status_codes=_SERVER_ERRORS)
                except ks_exceptions.ConnectionError as exc:
                    raise _failed(bitstream.id, retries + 1,
                                  f'{type(exc).__name__}: {exc}') from exc
                with resp:
                    _check_status(resp, bitstream.id, retries + 1)
                    try:
                        for chunk in resp.iter_content(_CHUNK):
                            out.write(chunk)
                    except _BODY_ERRORS as exc:
                        raise _Retry(f'{type(exc).__name__}: {exc}') from exc
                out.flush()
                os.fsync(out.fileno())
            problem = _verify_file(bitstream, temp_path)
            if problem is not None:
                raise _Retry(problem)
            os.replace(temp_path, path)
        except BaseException:
            _remove(temp_path)
            raise


def _failed(image_id: str, attempts: int, error: str
            ) -> exception.BitstreamError:
    return exception.BitstreamError(
        what=image_id,
        reason=f'download failed {attempts} time(s); last error: {error}')


def _check_status(resp: requests.Response, image_id: str,
                  attempts: int) -> None:
    if resp.status_code == 200:
        return
    if resp.status_code in _SERVER_ERRORS:
        raise _failed(image_id, attempts,
                      f'the image service answered {resp.status_code}')
    if resp.status_code == 404:
        raise exception.BitstreamNotFound(what=image_id)
    if resp.status_code == 204:
        raise exception.BitstreamError(what=image_id,
                                       reason='the image has no data')
    raise exception.BitstreamError(
        what=image_id,
        reason=f'the image service answered {resp.status_code} to the '
               'download')


def _verify_file(bitstream: Bitstream, path: str) -> str | None:
    """Why the file at ``path`` is not ``bitstream``'s data, or None.

    The strongest check the image offers: its multihash, else its MD5
    checksum, else its size.
    """
    size = os.path.getsize(path)
    if bitstream.size is not None and size != bitstream.size:
        return f'size is {size} bytes, expected {bitstream.size}'
    if bitstream.os_hash_algo and bitstream.os_hash_value:
        algo, expected = bitstream.os_hash_algo, bitstream.os_hash_value
    elif bitstream.checksum:
        algo, expected = 'md5', bitstream.checksum
    else:
        return None
    try:
        digest = hashlib.new(algo, usedforsecurity=(algo != 'md5'))
    except ValueError as exc:
        # Not worth another attempt: the answer would be the same.
        raise exception.BitstreamError(
            what=bitstream.id,
            reason=f'unknown hash algorithm {algo!r}') from exc
    with open(path, 'rb') as data:
        for chunk in iter(lambda: data.read(_CHUNK), b''):
            digest.update(chunk)
    if digest.hexdigest() != expected.lower():
        return f'{algo} is {digest.hexdigest()}, expected {expected}'
    return None


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
