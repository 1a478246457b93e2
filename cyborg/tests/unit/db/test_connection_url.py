"""The database URL every engine of the services is made from."""
import pytest

from cyborg.db import api as db_api


@pytest.mark.parametrize('url, expected', [
    ('mysql+pymysql://u:p@db/cyborg',
     'mysql+pymysql://u:p@db/cyborg?charset=utf8mb4'),
    ('mysql+pymysql://u:p@db/cyborg?ssl_ca=/ca.pem',
     'mysql+pymysql://u:p@db/cyborg?charset=utf8mb4&ssl_ca=%2Fca.pem'),
    # An operator's own choice stays.
    ('mysql+pymysql://u:p@db/cyborg?charset=utf8',
     'mysql+pymysql://u:p@db/cyborg?charset=utf8'),
    ('postgresql://u:p@db/cyborg', 'postgresql://u:p@db/cyborg'),
    ('sqlite:////var/lib/cyborg/cyborg.sqlite',
     'sqlite:////var/lib/cyborg/cyborg.sqlite'),
])
def test_mysql_connects_with_four_byte_utf8(url, expected):
    assert db_api.connection_url(url) == expected
