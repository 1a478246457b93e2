"""The local flake8 checks in cyborg.hacking.checks."""
import pytest

from cyborg.hacking import checks


def _run(check, line, *args):
    return list(check(line, *args))


@pytest.mark.parametrize('line, offset', [
    ('import eventlet', 7),
    ('import eventlet.greenpool', 7),
    ('import eventlet as ev', 7),
    ('import os, eventlet', 11),
    ('import os.path as p, eventlet', 21),
    ('from eventlet import greenthread', 5),
    ('from eventlet.green import threading', 5),
    ('    import eventlet', 11),
])
def test_c301_eventlet_imports_are_reported(line, offset):
    assert _run(checks.check_no_eventlet, line) == [(offset, checks.C301)]


@pytest.mark.parametrize('line', [
    'import eventlet_compat',
    'import os',
    'from oslo_service import backend',
    'from cyborg import eventlet_free',
    'from . import eventlet',
    'x = "import eventlet"',
    '# import eventlet',
])
def test_c301_other_lines_pass(line):
    assert _run(checks.check_no_eventlet, line) == []


# The offset is that of the % operator, the last % on each line.
@pytest.mark.parametrize('line', [
    'LOG.info("Found %s" % name)',
    "LOG.warning('%s and %s' % (a, b))",
    'LOG.debug(msg % args)',
    'LOG.error("a %s" "b" % x, exc_info=True)',
    'LOG.exception(_("Failed: %s") % err)',
    'LOG.critical(f"{x}" % y)',
    'self.LOG.warn("%d" % n)',
    'return LOG.info("%s" % x)',
    # As flake8 hands it over: string contents replaced by x.
    'LOG.info("xxxxxxxx" % name)',
])
def test_c302_eager_formatting_is_reported(line):
    assert _run(checks.check_lazy_log_args, line) == [
        (line.rindex('%'), checks.C302)]


@pytest.mark.parametrize('line', [
    'LOG.info("Found %s", name)',
    'LOG.info("Found %(name)s", {"name": name})',
    'LOG.info("100%")',
    'LOG.debug("%s", a % b)',
    'LOG.debug("%s", "%s" % b)',
    'LOG.warning(str(a % b))',
    'LOG.info("a, b %s" , x)',
    'LOG.info("(%s" , x)',
    'LOG.info("%s\\" % x", y)',
    'LOG.log(logging.INFO, "%s", x)',
    'print("x %s" % y)',
    'value = a % b',
])
def test_c302_lazy_calls_pass(line):
    assert _run(checks.check_lazy_log_args, line) == []


def test_c302_reports_every_call_on_a_line():
    line = 'LOG.info("%s" % a) or LOG.debug("%s" % b)'
    assert _run(checks.check_lazy_log_args, line) == [
        (14, checks.C302), (37, checks.C302)]


def test_c302_multiline_logical_line():
    line = 'LOG.info("""first %s\nsecond""" % x)'
    assert _run(checks.check_lazy_log_args, line) == [
        (line.rindex('%'), checks.C302)]


@pytest.mark.parametrize('line, previous, offset', [
    ('raise e', 'except Exception as e:', 0),
    ('raise exc', 'except (ValueError, KeyError) as exc:', 0),
    ('except Exception as e: raise e', 'try: pass', 23),
    ('except OSError as err:  raise err', '', 24),
])
def test_c303_reraise_as_whole_handler_is_reported(line, previous, offset):
    assert _run(checks.check_raise_caught, line, previous) == [
        (offset, checks.C303)]


@pytest.mark.parametrize('line, previous', [
    ('raise', 'except Exception as e:'),
    ('raise e', 'LOG.error("failed: %s", e)'),
    ('raise other', 'except Exception as e:'),
    ('raise e from None', 'except Exception as e:'),
    ('raise exception.DriverError(reason=e) from e',
     'except Exception as e:'),
    ('raise e', 'except Exception as e: LOG.error("x")'),
    ('except Exception as e: raise', 'try: pass'),
    ('except Exception as e: raise other', 'try: pass'),
    ('except Exception: raise', ''),
    ('raise e', None),
])
def test_c303_other_lines_pass(line, previous):
    assert _run(checks.check_raise_caught, line, previous) == []
