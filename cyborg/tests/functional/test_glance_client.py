"""The Glance client against a fake Glance served over real HTTP."""
import hashlib
import os
import uuid

import pytest

from cyborg.common import exception
from cyborg.common import glance_client
from cyborg.tests.fakes import fixtures

FUNCTION = 'a1b2c3d4-0000-4000-8000-00000000f00d'


@pytest.fixture
def client(conf, fake_glance):
    fixtures.glance_conf(conf, fake_glance)
    conf.set_override('download_retries', 2, 'glance')
    return glance_client.GlanceClient(conf, retry_delay=0.01)


def test_get_image(client, fake_glance):
    image = fake_glance.add_image(
        b'bits', name='bs', properties={'accel:function_id': FUNCTION,
                                        'accel:vendor': 'fake',
                                        'other': 'ignored'})
    bitstream = client.get_image(image['id'])
    assert bitstream == glance_client.Bitstream(
        id=image['id'], name='bs', size=4, os_hash_algo='sha512',
        os_hash_value=hashlib.sha512(b'bits').hexdigest(),
        checksum=hashlib.md5(b'bits').hexdigest(),
        properties={'accel:function_id': FUNCTION, 'accel:vendor': 'fake'})
    assert bitstream.function_id == FUNCTION
    assert glance_client.Bitstream.from_dict(bitstream.to_dict()) == bitstream
    [request] = fake_glance.requests
    assert request.path == f'/v2/images/{image["id"]}'
    assert request.headers['x-auth-token'] == fake_glance.token

    with pytest.raises(exception.BitstreamNotFound):
        client.get_image(str(uuid.uuid4()))
    with pytest.raises(exception.BitstreamNotFound):
        client.get_image('../../etc')
    fake_glance.fail_next(status=500)
    with pytest.raises(exception.BitstreamError, match='500'):
        client.get_image(image['id'])


def test_find_by_function(client, fake_glance):
    with pytest.raises(exception.BitstreamNotFound, match='0 images'):
        client.find_by_function(FUNCTION)
    assert fake_glance.requests[0].query == {
        'accel:function_id': [FUNCTION], 'status': ['active']}

    fake_glance.add_image(b'a', properties={'accel:function_id': 'other'})
    fake_glance.add_image(b'b', status='deactivated',
                          properties={'accel:function_id': FUNCTION})
    wanted = fake_glance.add_image(
        b'c', properties={'accel:function_id': FUNCTION})
    assert client.find_by_function(FUNCTION).id == wanted['id']

    extra = fake_glance.add_image(
        b'd', properties={'accel:function_id': FUNCTION})
    with pytest.raises(exception.BitstreamError) as err:
        client.find_by_function(FUNCTION)
    assert '2 active images match' in str(err.value)
    assert wanted['id'] in str(err.value) and extra['id'] in str(err.value)


def test_find_by_function_follows_pages(client, fake_glance, monkeypatch):
    for _ in range(3):
        fake_glance.add_image(b'x', properties={'accel:function_id': 'f'})
    monkeypatch.setattr('cyborg.tests.fakes.glance._DEFAULT_LIMIT', 2)
    with pytest.raises(exception.BitstreamError, match='3 active images'):
        client.find_by_function('f')
    assert len(fake_glance.requests) == 2
    assert 'marker' in fake_glance.requests[1].query


@pytest.mark.parametrize('hashes', [
    {}, {'multihash': False}, {'multihash': False, 'md5': False}],
    ids=['sha512', 'md5', 'size'])
def test_download_verifies_and_is_cached(client, fake_glance, tmp_path,
                                         hashes):
    data = os.urandom(300 * 1024)
    image = fake_glance.add_image(data, **hashes)
    bitstream = client.get_image(image['id'])
    path = client.download(bitstream, str(tmp_path / 'cache'))
    with open(path, 'rb') as f:
        assert f.read() == data
    assert os.listdir(tmp_path / 'cache') == [os.path.basename(path)]

    # The file is there and verifies: no second download.
    assert client.download(bitstream, str(tmp_path / 'cache')) == path
    assert len(fake_glance.downloads()) == 1

    # A damaged cache entry is downloaded again.
    with open(path, 'r+b') as f:
        f.write(b'\0\0\0\0')
    if hashes.get('md5') is False:
        # Only the size can be checked, and it still matches.
        assert client.download(bitstream, str(tmp_path / 'cache')) == path
        return
    client.download(bitstream, str(tmp_path / 'cache'))
    assert len(fake_glance.downloads()) == 2
    with open(path, 'rb') as f:
        assert f.read() == data


def test_download_retries_then_succeeds(client, fake_glance, tmp_path):
    data = os.urandom(200 * 1024)
    image = client.get_image(fake_glance.add_image(data)['id'])
    fake_glance.corrupt_next_download()
    fake_glance.fail_next_download(status=None)
    path = client.download(image, str(tmp_path))
    with open(path, 'rb') as f:
        assert f.read() == data
    assert [r.status for r in fake_glance.downloads()] == [200, 200, 200]
    assert os.listdir(tmp_path) == [os.path.basename(path)]


@pytest.mark.parametrize('status', [503, None], ids=['503', 'hang-up'])
def test_download_retries_failed_requests(client, fake_glance, tmp_path,
                                          status):
    image = client.get_image(fake_glance.add_image(b'bits')['id'])
    if status is None:
        # The connection closes before any answer.
        fake_glance.drop_next(2)
    else:
        fake_glance.fail_next_download(2, status=status)
    path = client.download(image, str(tmp_path))
    with open(path, 'rb') as f:
        assert f.read() == b'bits'
    assert [r.status for r in fake_glance.downloads()] == [status, status,
                                                           200]


def test_download_gives_up_with_a_clear_error(client, fake_glance, tmp_path):
    image = client.get_image(fake_glance.add_image(b'abc' * 1000)['id'])
    fake_glance.corrupt_next_download(3)
    with pytest.raises(exception.BitstreamError) as err:
        client.download(image, str(tmp_path))
    message = str(err.value)
    assert image.id in message
    assert 'failed 3 time(s)' in message
    assert 'sha512 is' in message
    assert os.listdir(tmp_path) == []

    fake_glance.fail_next_download(3, status=503)
    with pytest.raises(exception.BitstreamError,
                       match='failed 3 time.*answered 503'):
        client.download(image, str(tmp_path))
    assert len(fake_glance.downloads()) == 6


def test_download_errors_that_are_not_retried(client, fake_glance,
                                              tmp_path):
    gone = client.get_image(fake_glance.add_image(b'x')['id'])
    fake_glance.remove_image(gone.id)
    with pytest.raises(exception.BitstreamNotFound):
        client.download(gone, str(tmp_path))
    empty = client.get_image(fake_glance.add_image(None)['id'])
    with pytest.raises(exception.BitstreamError, match='no data'):
        client.download(empty, str(tmp_path))
    assert len(fake_glance.downloads()) == 2


def test_unreachable_glance(conf, fake_glance, tmp_path):
    fixtures.glance_conf(conf, fake_glance)
    conf.set_override('download_retries', 1, 'glance')
    client = glance_client.GlanceClient(conf, retry_delay=0.01)
    image = client.get_image(fake_glance.add_image(b'x')['id'])
    fake_glance.stop()
    with pytest.raises(exception.BitstreamError, match='cannot reach'):
        client.get_image(image.id)
    with pytest.raises(exception.BitstreamError,
                       match='failed 2 time.*ConnectFailure'):
        client.download(image, str(tmp_path))


def test_unconfigured_glance(conf):
    """No [glance] section: the error says so, not keystoneauth's
    "An auth plugin is required to determine endpoint URL"."""
    client = glance_client.GlanceClient(conf)
    for call in (lambda: client.get_image(str(uuid.uuid4())),
                 lambda: client.find_by_function(FUNCTION)):
        with pytest.raises(exception.BitstreamError) as raised:
            call()
        assert 'Glance is not configured: [glance] has no auth_type' in \
            str(raised.value)
