"""What a column holds, read from a mapped attribute or a Column alike."""
import pytest

from cyborg.db import models
from cyborg.db.api import query


@pytest.mark.parametrize('column', [models.Service.host,
                                    models.Service.__table__.c.host])
def test_string_column(column):
    assert query.max_chars(column) == 255
    assert query.max_bytes(column) is None


def test_text_column():
    assert query.max_chars(models.DeviceProfile.groups) is None
    assert query.max_bytes(models.DeviceProfile.groups) == query.TEXT_BYTES


@pytest.mark.parametrize('column', [models.Service.id,
                                    models.Service.__table__.c.id])
def test_integer_column(column):
    low, high = query.integer_range(column)
    assert high in (2 ** 31 - 1, 2 ** 63 - 1)
    assert low == -high - 1
