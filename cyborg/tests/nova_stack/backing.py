"""Throw-away MariaDB databases and RabbitMQ virtual hosts for a stack."""
import os
import subprocess
import urllib.parse
import uuid

import sqlalchemy as sa

MYSQL_URL = os.environ.get('CYBORG_TEST_MYSQL_URL',
                           'mysql+pymysql://root@127.0.0.1:3306/')
RABBIT_URL = os.environ.get('CYBORG_TEST_RABBIT_URL',
                            'rabbit://guest:guest@127.0.0.1:5672/')


class Database:
    """A throw-away MariaDB database, created and dropped here."""

    def __init__(self, server_url: str, prefix: str) -> None:
        self.name = f'{prefix}_{uuid.uuid4().hex[:12]}'
        base = sa.engine.make_url(server_url)
        self.admin = sa.create_engine(base.set(database=None),
                                      isolation_level='AUTOCOMMIT')
        self.url = base.set(database=self.name).render_as_string(
            hide_password=False)

    def create(self) -> 'Database':
        with self.admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE {self.name}'))
        return self

    def drop(self) -> None:
        with self.admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS {self.name}'))
        self.admin.dispose()


class VirtualHost:
    """A RabbitMQ virtual host of our own, when rabbitmqctl is at hand."""

    def __init__(self, url: str, prefix: str = 'cyborg-tempest') -> None:
        self.parsed = urllib.parse.urlsplit(url)
        self.name = f'{prefix}-{uuid.uuid4().hex[:12]}'
        self.url = url
        self.created = False

    @staticmethod
    def _ctl(*args: str) -> None:
        subprocess.run(['rabbitmqctl', *args], check=True, timeout=60,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def create(self) -> str:
        try:
            self._ctl('add_vhost', self.name)
            self.created = True
            self._ctl('set_permissions', '-p', self.name,
                      self.parsed.username or 'guest', '.*', '.*', '.*')
        except (OSError, subprocess.SubprocessError):
            # A remote broker: share its default virtual host.
            return self.url
        return urllib.parse.urlunsplit(
            self.parsed._replace(path=f'/{self.name}'))

    def delete(self) -> str | None:
        """Delete it if it was made here; why that failed, if it did."""
        if self.created:
            try:
                self._ctl('delete_vhost', self.name)
            except (OSError, subprocess.SubprocessError) as exc:
                return f'could not delete virtual host {self.name}: {exc}'
        return None
