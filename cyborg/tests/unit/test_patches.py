"""Each patch of a library's internals (``cyborg.common.patches``) still
takes effect: these fail when an upgrade makes one a no-op."""
import inspect

import pecan.util
import sqlalchemy as sa
import wsme.api
import wsmeext.pecan
from oslo_messaging._drivers import amqpdriver

from cyborg import context as cyborg_context
from cyborg.api import expose
from cyborg.cmd import common
from cyborg.common import patches
from cyborg.common import rpc
from cyborg.conf import CONF
from cyborg.db import api as db_api


def test_pecan_reads_the_cached_argspec():
    patches.cache_pecan_argspecs()
    # Every controller signature pecan inspects goes through getargspec,
    # which must look _getargspec up on pecan.util when it runs.
    assert pecan.util.getargspec.__globals__['_getargspec'] is (
        patches._cached_argspec)
    assert '_getargspec' in pecan.util.getargspec.__code__.co_names

    class Controller:
        def get_one(self, uuid, fields=None):
            """A controller method."""

    first = pecan.util.getargspec(Controller.get_one)
    assert first.args == ['self', 'uuid', 'fields']
    assert first.defaults == (None,)
    assert pecan.util.getargspec(Controller.get_one) is first


def test_wsme_formats_faults_with_ours():
    # Installed when cyborg.api.expose is imported.
    assert wsme.api.format_exception.func is expose.format_exception
    # wsmeext.pecan must still look the formatter up on wsme.api at each
    # error, not keep the one it imported.
    source = inspect.getsource(wsmeext.pecan.wsexpose)
    assert 'wsme.api.format_exception(' in source
    try:
        raise RuntimeError('SELECT secret FROM hosts')
    except RuntimeError as exc:
        fault = wsme.api.format_exception((type(exc), exc, None))
    assert 'secret' not in fault['faultstring']
    assert fault['faultcode'] == 'Server'


def test_listeners_read_the_poll_interval_that_init_sets():
    for listener in (amqpdriver.AMQPListener, amqpdriver.ReplyWaiter):
        assert 'ACK_REQUEUE_EVERY_SECONDS_MIN' in inspect.getsource(listener)
    rpc.cleanup()
    try:
        rpc.init(CONF, url='fake://')
        assert amqpdriver.ACK_REQUEUE_EVERY_SECONDS_MIN == (
            rpc.POLL_AFTER_MESSAGE)
    finally:
        rpc.cleanup()


def test_idle_listeners_read_the_poll_bound_that_launched_processes_set():
    """An upgrade that stops reading it would bring back 5 s stops."""
    for listener in (amqpdriver.AMQPListener, amqpdriver.ReplyWaiter):
        assert 'ACK_REQUEUE_EVERY_SECONDS_MAX' in inspect.getsource(listener)
    before = amqpdriver.ACK_REQUEUE_EVERY_SECONDS_MAX
    try:
        patches.poll_idle_at_most(common.IDLE_POLL)
        assert amqpdriver.ACK_REQUEUE_EVERY_SECONDS_MAX == common.IDLE_POLL
    finally:
        amqpdriver.ACK_REQUEUE_EVERY_SECONDS_MAX = before


def test_patched_engine_serves_every_transaction(tmp_path):
    engine = sa.create_engine(f'sqlite:///{tmp_path}/patched.db')
    undo = db_api.patch_engine(engine)
    try:
        assert db_api.get_engine() is engine

        @db_api.reader
        def bind(context):
            return context.session.get_bind()

        assert bind(cyborg_context.get_admin_context()) is engine
    finally:
        undo()
        engine.dispose()
