"""Absolute links in responses, honouring [api] public_endpoint."""
import pecan


def base_url() -> str:
    """The URL the API is reached at, without a trailing slash."""
    endpoint = pecan.request.conf.api.public_endpoint
    if endpoint:
        return endpoint.rstrip('/')
    return pecan.request.application_url.rstrip('/')


def make_link(rel: str, *parts: str) -> dict[str, str]:
    path = '/'.join(p.strip('/') for p in parts if p.strip('/'))
    trailing = '/' if parts and parts[-1].endswith('/') else ''
    return {'rel': rel, 'href': f'{base_url()}/{path}{trailing}'}
