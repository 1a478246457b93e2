"""A headless Chromium driven by selenium, for Horizon's pages.

Chromium and its WebDriver are Debian's ``chromium`` and
``chromium-driver`` packages (installed through system_packages when
missing); selenium is pointed at /usr/bin/chromedriver, so that its
selenium-manager never runs (it would download a driver). ``Browser``
knows Horizon's login form, its navigation and its data tables
(``<table id="<name>">`` with a header row and one ``<tr>`` per item, a
single ``tr.empty`` when there is none).
"""
import os
import pathlib
import shutil
import tempfile
from typing import Any

from cyborg.tests.harness import system_packages

PACKAGES = ('chromium', 'chromium-driver')
CHROMIUM = '/usr/bin/chromium'
CHROMEDRIVER = '/usr/bin/chromedriver'
# Seconds an element gets to appear: a Horizon page calls Keystone and
# cyborg-api before it answers, 0.2-1 s each here.
WAIT = 30
# The window of every page and screenshot, wide enough for Horizon's
# navigation beside a table.
WINDOW = (1400, 900)


def install() -> None:
    """Debian's Chromium and its WebDriver, when missing."""
    system_packages.debian(*PACKAGES)


class LoginFailed(AssertionError):
    pass


class Browser:
    """One headless Chromium session, with a profile of its own under
    ``workdir`` (removed by ``quit``)."""

    def __init__(self, workdir: pathlib.Path) -> None:
        # Imported here: selenium is a test requirement, checked by the
        # test (conftest.require_module), not by importing this module.
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        # selenium-manager is not run when the driver's path is given;
        # offline, it would not download anything if it were.
        os.environ.setdefault('SE_OFFLINE', 'true')
        self.workdir = workdir
        # Pages where a wait failed are kept in workdir, numbered.
        self.failures = 0
        self.profile = pathlib.Path(tempfile.mkdtemp(
            prefix='chromium-', dir=workdir))
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for argument in (
                '--headless=new',
                # Root (the test runs as root here) needs it; so does a
                # container without user namespaces.
                '--no-sandbox',
                # /dev/shm of a container is 64 MiB: too small for a page.
                '--disable-dev-shm-usage',
                '--disable-gpu',
                f'--window-size={WINDOW[0]},{WINDOW[1]}',
                f'--user-data-dir={self.profile}',
                '--no-first-run',
                '--disable-extensions',
                '--disable-background-networking',
                '--disable-component-update',
                '--disable-sync',
                '--lang=en-US'):
            options.add_argument(argument)
        self.log_path = workdir / 'chromedriver.log'
        service = Service(executable_path=CHROMEDRIVER,
                          log_output=str(self.log_path))
        self.driver = webdriver.Chrome(service=service, options=options)
        self.driver.set_page_load_timeout(WAIT * 2)

    def quit(self) -> None:
        try:
            self.driver.quit()
        finally:
            shutil.rmtree(self.profile, ignore_errors=True)

    # -- pages ---------------------------------------------------------------

    def open(self, url: str) -> None:
        """Load ``url`` and wait until the document is complete."""
        self.driver.get(url)
        self.wait(lambda d: d.execute_script(
            'return document.readyState') == 'complete', f'{url} to load')

    @property
    def url(self) -> str:
        return str(self.driver.current_url)

    @property
    def title(self) -> str:
        return str(self.driver.title)

    def wait(self, condition: Any, what: str, timeout: float = WAIT) -> Any:
        """What ``condition(driver)`` returns once it is truthy; fails
        with ``what`` and the page's URL after ``timeout`` seconds."""
        from selenium.common.exceptions import TimeoutException
        from selenium.webdriver.support.ui import WebDriverWait
        try:
            return WebDriverWait(self.driver, timeout, 0.2).until(condition)
        except TimeoutException:
            self.failures += 1
            page = self.workdir / f'failed-{self.failures}.html'
            page.write_text(self.driver.page_source)
            self.screenshot(page.with_suffix('.png'))
            raise AssertionError(f'waited {timeout}s for {what} on '
                                 f'{self.url} (the page: {page})') from None

    def element(self, css: str, timeout: float = WAIT) -> Any:
        """The first element matching the CSS selector ``css``, once it
        is displayed."""
        from selenium.webdriver.common.by import By

        def shown(driver: Any) -> Any:
            for found in driver.find_elements(By.CSS_SELECTOR, css):
                if found.is_displayed():
                    return found
            return None

        return self.wait(shown, f'element {css!r}', timeout)

    def elements(self, css: str) -> list[Any]:
        """Every element matching ``css`` now (no wait)."""
        from selenium.webdriver.common.by import By
        return list(self.driver.find_elements(By.CSS_SELECTOR, css))

    def text(self, css: str = 'body') -> str:
        """The visible text of the first element matching ``css``."""
        return str(self.element(css).text)

    def screenshot(self, path: pathlib.Path) -> pathlib.Path:
        """A PNG of the window as it is now, written to ``path``."""
        path.parent.mkdir(parents=True, exist_ok=True)
        if not self.driver.save_screenshot(str(path)):
            raise AssertionError(f'no screenshot written to {path}')
        return path

    # -- Horizon -------------------------------------------------------------

    def login(self, horizon_url: str, user: str, password: str) -> None:
        """Sign in through Horizon's login form (default domain), and
        wait until Horizon has left the form: its user menu is shown.
        Horizon scopes the session to the user's first project."""
        self.open(horizon_url + '/auth/login/')
        self.element('#id_username').send_keys(user)
        self.element('#id_password').send_keys(password)
        self.element('#loginBtn').click()

        def left_form(driver: Any) -> bool | str:
            from selenium.webdriver.common.by import By
            errors = driver.find_elements(By.CSS_SELECTOR,
                                          '.login .alert-danger, '
                                          '.login .error')
            shown = [e.text for e in errors if e.is_displayed()]
            if shown:
                return ' '.join(shown)
            return '/auth/login/' not in driver.current_url and bool(
                driver.find_elements(By.CSS_SELECTOR,
                                     '.navbar .dropdown.user-menu, '
                                     '#profile_editor_switcher, '
                                     'a[href$="/auth/logout/"]'))

        found = self.wait(left_form, f'{user} to be signed in')
        if isinstance(found, str):
            raise LoginFailed(f'{user} was refused: {found}')

    def logout(self, horizon_url: str) -> None:
        self.open(horizon_url + '/auth/logout/')
        self.element('#id_username')

    def switch_project(self, horizon_url: str, project_id: str) -> None:
        """Rescope the session to ``project_id`` (Horizon's project
        switcher), back to the page it was on."""
        self.open(f'{horizon_url}/auth/switch/{project_id}/')

    def navigation(self) -> list[str]:
        """The path of every panel in the side navigation (this page's
        dashboard and the others'), e.g. ``/admin/info/``."""
        return sorted({str(a.get_attribute('pathname')) for a in
                       self.elements('#sidebar-accordion a.openstack-panel')})

    def panels(self, dashboard: str, group: str) -> dict[str, str]:
        """The panels of ``group`` (its slug) in the navigation of
        ``dashboard`` (its slug): label -> path. Read from the markup, so
        that a collapsed group is read too."""
        return {str(a.get_attribute('textContent')).strip():
                str(a.get_attribute('pathname'))
                for a in self.elements(f'#sidebar-accordion-{dashboard}-'
                                       f'{group} a.openstack-panel')}

    def errors(self) -> list[str]:
        """Horizon's error messages on the page (its red alerts, and the
        page of a refused panel)."""
        found = [str(e.text).strip() for e in self.elements(
            '.messages .alert-danger, .alert.alert-danger')]
        body = self.text()
        if 'You are not authorized to access this page' in body:
            found.append('not authorized')
        return [text for text in found if text]

    def table(self, name: str) -> list[dict[str, str]]:
        """The rows of Horizon's data table ``name`` (its element id), one
        dict a row from column header to cell text; [] for the table's
        "no items" row."""
        table = self.element(f'table#{name}')
        from selenium.webdriver.common.by import By
        headers = [th.text.strip() for th in table.find_elements(
            By.CSS_SELECTOR, 'thead tr:last-child th')]
        rows = []
        for row in table.find_elements(By.CSS_SELECTOR, 'tbody tr'):
            if 'empty' in (row.get_attribute('class') or '').split():
                continue
            cells = [td.text.strip() for td in
                     row.find_elements(By.CSS_SELECTOR, 'td')]
            rows.append(dict(zip(headers, cells, strict=True)))
        return rows

    def click(self, text: str, within: str = 'body') -> None:
        """Click the link or button of ``within`` that reads ``text``
        (a table's action, a tab, a row's name), waiting for it."""
        from selenium.webdriver.common.by import By

        def clickable(driver: Any) -> Any:
            for scope in driver.find_elements(By.CSS_SELECTOR, within):
                for found in scope.find_elements(
                        By.CSS_SELECTOR, 'a, button, input[type=submit]'):
                    label = (found.text or found.get_attribute('value')
                             or '').strip()
                    if label == text and found.is_displayed():
                        return found
            return None

        self.wait(clickable, f'{text!r} to click in {within}').click()

    # -- forms, modals, messages ---------------------------------------------

    def fill(self, css: str, value: str) -> None:
        """Type ``value`` into the field ``css`` in place of its text."""
        field = self.element(css)
        field.clear()
        field.send_keys(value)

    def choose(self, css: str, value: str) -> None:
        """Select the option of value ``value`` in the select ``css``."""
        from selenium.webdriver.support.ui import Select
        Select(self.element(css)).select_by_value(value)

    def submit_modal(self) -> None:
        """Press the submit button of the modal form shown now (Horizon
        posts it by XHR, then follows its redirect or shows it again
        with the errors)."""
        self.element('.modal.in .modal-footer [type=submit], '
                     '.modal.in .modal-footer .btn-primary').click()

    def confirm(self) -> None:
        """Press the confirm button of Horizon's "Please confirm your
        selection" dialog (shown for a batch action and every
        ``btn-danger`` button)."""
        self.element('.modal.in .modal-footer a.btn-danger, '
                     '.modal.in .modal-footer a.btn-primary').click()

    def message(self, kind: str, containing: str) -> str:
        """The text of Horizon's ``kind`` message (``success``, ``danger``,
        ``warning``) that contains ``containing``, once there. Read from
        the markup: a success message fades out after a few seconds."""
        css = f'.messages .alert-{kind}, .modal .alert-{kind}'

        def found(driver: Any) -> str | None:
            from selenium.webdriver.common.by import By
            for alert in driver.find_elements(By.CSS_SELECTOR, css):
                text = ' '.join(str(alert.get_attribute('textContent'))
                                .split())
                if containing in text:
                    return text
            return None

        return str(self.wait(found, f'a {kind} message with {containing!r}'))

    def row_action(self, table: str, row: str, action: str) -> None:
        """Click the row action ``action`` (its label) of the row of id
        ``row`` in the data table ``table``, opening the row's menu of
        more actions first when the action is in it."""
        from selenium.webdriver.common.by import By
        css = f'tr#{table}__row__{row} td.actions_column'
        cell = self.element(css)

        def labelled() -> Any:
            for found in cell.find_elements(By.CSS_SELECTOR,
                                            'a, button'):
                if str(found.get_attribute('textContent')).strip() == action:
                    return found
            raise AssertionError(f'no {action!r} among the actions of '
                                 f'{row} in {table}: {cell.text!r}')

        button = labelled()
        if not button.is_displayed():
            cell.find_element(By.CSS_SELECTOR, '.dropdown-toggle').click()
        self.wait(lambda driver: button.is_displayed(),
                  f'{action!r} of {row} to show')
        button.click()
