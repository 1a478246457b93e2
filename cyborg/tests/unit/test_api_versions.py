"""versions.requested: a request's microversion header, parsed once."""
import pytest

from cyborg.api import versions


def test_parsed_on_first_use_and_kept_for_the_request():
    environ = {'HTTP_OPENSTACK_API_VERSION': 'accelerator 2.3'}
    assert versions.requested(environ) == versions.APIVersion(2, 3)
    # Later readers (the routes table, then the microversion hook) get
    # what the first one parsed.
    environ['HTTP_OPENSTACK_API_VERSION'] = 'accelerator 2.1'
    assert versions.requested(environ) == versions.APIVersion(2, 3)


def test_no_header_is_the_oldest_version():
    assert versions.requested({}) == versions.APIVersion(2, 0)


def test_a_bad_header_is_refused_to_every_reader():
    environ = {'HTTP_OPENSTACK_API_VERSION': 'accelerator 2.99'}
    for _ in range(2):
        with pytest.raises(versions.InvalidVersion,
                           match='Version 2.99 was requested'):
            versions.requested(environ)


def test_the_list_is_the_microversions_in_order():
    named = list(versions.Microversion)
    assert named == sorted(named)
    assert [tuple(v) for v in named] == list(versions.VERSIONS)
    assert versions.MIN_VERSION == (2, 0)
    assert versions.MAX_VERSION == tuple(named[-1])
    # One step of the minor version each: none is skipped.
    assert [v.minor for v in named] == list(range(len(named)))
