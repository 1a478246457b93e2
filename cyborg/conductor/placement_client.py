"""A small placement client: the calls the conductor makes, each pinned.

Every call names the placement microversion it was written against, at
least 1.23 wherever the caller must tell errors apart by their code.
Writes guarded by a provider generation are retried on
``placement.concurrent_update`` after re-reading the generation, up to
``[placement] conflict_retries`` times. ``calls`` counts the requests sent,
for tests and benchmarks. ``is_away`` tells an error that says placement
cannot be reached from one that refuses a particular request.
"""
import itertools
import logging
import threading
from collections.abc import Callable
from typing import Any

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import exceptions as ks_exc
from oslo_config import cfg

from cyborg.common import exception
from cyborg.common import keystone

LOG = logging.getLogger(__name__)

# Microversions, one per kind of call.
MV_FIND = '1.14'        # name= and in_tree= filters, parent uuids shown
MV_TREE = '1.18'        # in_tree= with required= traits
MV_CREATE = '1.20'      # parent_provider_uuid; the new provider returned
MV_TRAITS = '1.23'      # error codes
MV_INVENTORY = '1.26'   # reserved may equal total (a disabled device)
MV_DELETE = '1.23'      # error codes tell "in use" from "has children"
MV_CLASSES = '1.23'
# consumer_generation, project_id and user_id in a consumer's allocations;
# an empty PUT deletes them. Below 1.38, so an existing consumer keeps
# the consumer_type Nova gave it.
MV_ALLOCATIONS = '1.28'
MV_USAGES = '1.23'

CONCURRENT_UPDATE = 'placement.concurrent_update'
INVENTORY_IN_USE = 'placement.inventory.inuse'
PROVIDER_IN_USE = 'placement.resource_provider.inuse'
DUPLICATE_NAME = 'placement.duplicate_name'

# What a proxy or load balancer in front of placement answers while no
# placement process serves it.
GATEWAY_ERRORS = (502, 503, 504)

Inventories = dict[str, dict[str, Any]]


def is_custom(name: str) -> bool:
    return name.startswith('CUSTOM_')


def is_away(exc: exception.PlacementError) -> bool:
    """Whether ``exc`` says placement (or the Keystone in front of it)
    cannot be reached at the moment, so that any other call would fail
    the same way; not when it refused one request."""
    return bool(exc.kwargs.get('away'))


class PlacementClient:
    """The placement calls of the conductor, over a keystoneauth Adapter."""

    def __init__(self, conf: cfg.ConfigOpts,
                 adapter: ks_adapter.Adapter | None = None) -> None:
        self.conf = conf
        self._adapter = adapter
        self._adapter_lock = threading.Lock()
        self._counter = itertools.count()
        self.calls = 0
        # Custom classes and traits known to exist; placement never deletes
        # them by itself, and a stale entry costs one failed write.
        self._known_classes: set[str] = set()
        self._known_traits: set[str] = set()
        # Held while a class or trait is created: threads syncing hosts
        # at once would all create the first one (two conductors made
        # three PUTs of one trait when 50 hosts registered together).
        self._known_lock = threading.Lock()

    @property
    def adapter(self) -> ks_adapter.Adapter:
        with self._adapter_lock:
            if self._adapter is None:
                self._adapter = keystone.get_adapter(self.conf, 'placement')
            return self._adapter

    def _send(self, method: str, url: str, microversion: str,
              json: Any = None) -> Any:
        self.calls = next(self._counter) + 1
        kwargs: dict[str, Any] = {'microversion': microversion,
                                  'raise_exc': False}
        if json is not None:
            kwargs['json'] = json
        try:
            return self.adapter.request(url, method, **kwargs)
        except ks_exc.ClientException as exc:
            # A failed token request to Keystone lands here too: only
            # a refused or lost connection, or a server error, is an
            # outage; bad credentials or a missing endpoint are not.
            raise exception.PlacementError(
                method=method, url=url, status='no answer', error_code='',
                detail=exc, away=isinstance(exc, (
                    ks_exc.ConnectionError, ks_exc.HttpServerError))
            ) from exc

    def _request(self, method: str, url: str, microversion: str,
                 expected: tuple[int, ...], json: Any = None) -> Any:
        """Send one request; the decoded body, None on 404 if expected."""
        response = self._send(method, url, microversion, json)
        if response.status_code in expected:
            if response.status_code == 404 or not response.content:
                return None
            return response.json()
        self._raise(method, url, response)

    @staticmethod
    def _raise(method: str, url: str, response: Any) -> None:
        code, detail = '', response.text[:500]
        try:
            error = response.json()['errors'][0]
            code, detail = error.get('code', ''), error.get('detail', detail)
        except (ValueError, KeyError, IndexError, TypeError):
            pass
        kind = exception.PlacementError
        if response.status_code == 409 and code == CONCURRENT_UPDATE:
            kind = exception.PlacementGenerationConflict
        elif response.status_code == 409 and code in (INVENTORY_IN_USE,
                                                      PROVIDER_IN_USE):
            kind = exception.PlacementProviderInUse
        elif response.status_code == 409 and method == 'PUT' \
                and url.startswith('/allocations/'):
            # Placement gives capacity and missing-inventory refusals of
            # an allocation no code of their own (placement.undefined_code).
            kind = exception.PlacementNoRoom
        raise kind(method=method, url=url, status=response.status_code,
                   error_code=code, detail=detail,
                   away=response.status_code in GATEWAY_ERRORS)

    # Providers

    def find_provider(self, name: str) -> dict[str, Any] | None:
        """The provider named ``name`` (a compute node), or None."""
        body = self._request('GET', f'/resource_providers?name={name}',
                             MV_FIND, (200,))
        providers = body['resource_providers']
        return providers[0] if providers else None

    def get_provider(self, uuid: str) -> dict[str, Any] | None:
        return self._request('GET', f'/resource_providers/{uuid}', MV_FIND,
                             (200, 404))

    def get_tree(self, root_uuid: str, required: str | None = None
                 ) -> list[dict[str, Any]]:
        """Every provider in the tree of ``root_uuid``, optionally only
        those with the trait ``required``."""
        url = f'/resource_providers?in_tree={root_uuid}'
        if required:
            url += f'&required={required}'
        return self._request('GET', url, MV_TREE,
                             (200,))['resource_providers']

    def create_provider(self, uuid: str, name: str, parent_uuid: str
                        ) -> dict[str, Any]:
        """Create a child provider; an existing one with this uuid is
        returned as it is (another conductor may have just made it)."""
        try:
            return self._request(
                'POST', '/resource_providers', MV_CREATE, (200,),
                json={'uuid': uuid, 'name': name,
                      'parent_provider_uuid': parent_uuid})
        except exception.PlacementError as exc:
            if exc.kwargs.get('status') != 409:
                raise
            existing = self.get_provider(uuid)
            if existing is None:
                # The name belongs to a provider we do not know.
                raise
            return existing

    def delete_provider(self, uuid: str) -> bool:
        """Delete a provider and its descendants, deepest first.

        False if it was already gone. PlacementProviderInUse while
        anything is allocated from it.
        """
        url = f'/resource_providers/{uuid}'
        response = self._send('DELETE', url, MV_DELETE)
        if response.status_code in (204, 404):
            return response.status_code == 204
        try:
            self._raise('DELETE', url, response)
        except exception.PlacementProviderInUse:
            raise
        except exception.PlacementError as exc:
            if exc.kwargs.get('status') != 409:
                raise
        # "Unable to delete parent resource provider": children first.
        depth = _depths(self.get_tree(uuid), uuid)
        for node in sorted(depth, key=lambda u: -depth[u]):
            self._request('DELETE', f'/resource_providers/{node}',
                          MV_DELETE, (204, 404))
        return True

    # Resource classes and traits

    def ensure_resource_class(self, name: str) -> None:
        """Create a custom resource class unless known; standard ones
        always exist and must not be created."""
        if not is_custom(name) or name in self._known_classes:
            return
        with self._known_lock:
            if name not in self._known_classes:
                self._request('PUT', f'/resource_classes/{name}',
                              MV_CLASSES, (201, 204))
                self._known_classes.add(name)

    def ensure_traits(self, names: set[str]) -> None:
        if not any(is_custom(name) and name not in self._known_traits
                   for name in names):
            return
        with self._known_lock:
            for name in sorted(names):
                if is_custom(name) and name not in self._known_traits:
                    self._request('PUT', f'/traits/{name}', MV_TRAITS,
                                  (201, 204))
                    self._known_traits.add(name)

    def forget_known(self) -> None:
        """Re-create classes and traits on next use (after a 400)."""
        self._known_classes.clear()
        self._known_traits.clear()

    # Inventories and traits of a provider, guarded by its generation

    def get_inventories(self, uuid: str) -> tuple[int, Inventories]:
        body = self._request('GET', f'/resource_providers/{uuid}/inventories',
                             MV_INVENTORY, (200,))
        return body['resource_provider_generation'], body['inventories']

    def get_traits(self, uuid: str) -> tuple[int, set[str]]:
        body = self._request('GET', f'/resource_providers/{uuid}/traits',
                             MV_TRAITS, (200,))
        return body['resource_provider_generation'], set(body['traits'])

    def set_inventories(self, uuid: str, inventories: Inventories,
                        generation: int | None = None) -> int:
        """Replace the provider's inventories; its new generation."""
        return self._guarded(
            uuid, generation, lambda: self.get_inventories(uuid)[0],
            lambda g: self._request(
                'PUT', f'/resource_providers/{uuid}/inventories',
                MV_INVENTORY, (200,),
                json={'resource_provider_generation': g,
                      'inventories': inventories}))

    def set_traits(self, uuid: str, traits: set[str],
                   generation: int | None = None) -> int:
        """Replace the provider's traits; its new generation."""
        return self._guarded(
            uuid, generation, lambda: self.get_traits(uuid)[0],
            lambda g: self._request(
                'PUT', f'/resource_providers/{uuid}/traits', MV_TRAITS,
                (200,), json={'resource_provider_generation': g,
                              'traits': sorted(traits)}))

    # A consumer's allocations, guarded by its generation

    def get_allocations(self, consumer: str) -> dict[str, Any]:
        """The consumer's allocations, its generation (None when it holds
        nothing), project and user."""
        return self._request('GET', f'/allocations/{consumer}',
                             MV_ALLOCATIONS, (200,))

    def put_allocations(self, consumer: str,
                        allocations: dict[str, dict[str, int]],
                        generation: int | None, project_id: str,
                        user_id: str) -> None:
        """Replace the consumer's allocations (provider uuid -> resource
        class -> amount) if its generation is still ``generation``;
        PlacementGenerationConflict otherwise, PlacementNoRoom when a
        provider cannot take what is asked of it."""
        self._request(
            'PUT', f'/allocations/{consumer}', MV_ALLOCATIONS, (204,),
            json={'allocations': {rp: {'resources': resources}
                                  for rp, resources in allocations.items()},
                  'consumer_generation': generation,
                  'project_id': project_id, 'user_id': user_id})

    def get_usages(self, uuid: str) -> dict[str, int]:
        """What is allocated from the provider, by resource class."""
        return self._request('GET', f'/resource_providers/{uuid}/usages',
                             MV_USAGES, (200,))['usages']

    def _guarded(self, uuid: str, generation: int | None,
                 read: Callable[[], int],
                 write: Callable[[int], dict[str, Any]]) -> int:
        retries = self.conf.placement.conflict_retries
        for attempt in itertools.count():
            if generation is None:
                generation = read()
            try:
                return write(generation)['resource_provider_generation']
            except exception.PlacementGenerationConflict:
                if attempt >= retries:
                    raise
                LOG.debug('Provider %s changed under us (generation %s); '
                          're-reading it.', uuid, generation)
                generation = None
        raise AssertionError('unreachable')


def _depths(tree: list[dict[str, Any]], root: str) -> dict[str, int]:
    """Depth below ``root`` of each provider under it (root itself: 0).

    ``in_tree`` answers the whole tree, ancestors and cousins included;
    they are left out.
    """
    parents = {p['uuid']: p.get('parent_provider_uuid') for p in tree}
    depths: dict[str, int] = {}
    for uuid in parents:
        depth, node = 0, uuid
        while node is not None and node != root:
            node = parents.get(node)
            depth += 1
        if node == root:
            depths[uuid] = depth
    return depths
