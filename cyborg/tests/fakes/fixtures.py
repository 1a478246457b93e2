"""pytest fixtures that run the fakes, and helpers pointing cyborg at them."""
from collections.abc import Iterator
from typing import TypeVar

import pytest
from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

from cyborg.tests.fakes import glance
from cyborg.tests.fakes import http
from cyborg.tests.fakes import nova

Fake = TypeVar('Fake', bound=http.FakeHTTPServer)


def running(fake: Fake) -> Iterator[Fake]:
    """Serve ``fake`` for one test; a fake whose handler broke fails it."""
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()
    if fake.errors:
        pytest.fail(f'{type(fake).__name__} failed:\n'
                    + '\n'.join(fake.errors), pytrace=False)


@pytest.fixture
def fake_nova() -> Iterator[nova.FakeNova]:
    """A started FakeNova; see ``nova_conf`` to point [nova] at it."""
    yield from running(nova.FakeNova())


def use_admin_token(conf: cfg.ConfigOpts, group: str, token: str,
                    endpoint: str) -> None:
    """Make ``group`` authenticate with keystoneauth's ``admin_token``
    plugin: a fixed token, sent to a fixed endpoint, no Keystone.

    keystoneauth registers a plugin's options only when it loads the
    plugin, so they are registered here first to be overridden (the same
    options again, which oslo.config accepts).
    """
    conf.register_opts(ks_loading.get_auth_plugin_conf_options('admin_token'),
                       group=group)
    conf.set_override('auth_type', 'admin_token', group=group)
    conf.set_override('token', token, group=group)
    conf.set_override('endpoint', endpoint, group=group)
    # ConfigOpts.reset() (the ``conf`` fixture's teardown) also drops the
    # service_type default that cyborg.conf sets, and without a service
    # type keystoneauth does not ask the plugin for its endpoint at all.
    conf.set_override('endpoint_override', endpoint, group=group)


def nova_conf(conf: cfg.ConfigOpts, fake: nova.FakeNova) -> cfg.ConfigOpts:
    """Point [nova] at ``fake``, with the token it expects; returns conf."""
    use_admin_token(conf, 'nova', fake.token, fake.endpoint)
    return conf


@pytest.fixture
def fake_glance() -> Iterator[glance.FakeGlance]:
    """A started FakeGlance; see ``glance_conf`` to point [glance] at it."""
    yield from running(glance.FakeGlance())


def glance_conf(conf: cfg.ConfigOpts,
                fake: glance.FakeGlance) -> cfg.ConfigOpts:
    """Point [glance] at ``fake``, with the token it expects; returns
    conf."""
    use_admin_token(conf, 'glance', fake.token, fake.endpoint)
    # The conf fixture's reset() also drops the defaults set when the
    # group was registered, and without a service type keystoneauth finds
    # no endpoint even for a fixed one.
    conf.set_override('service_type', 'image', group='glance')
    return conf
