"""The student and instructor flows of the course service in headless Chromium, end to end.

``course serve`` runs as a subprocess (one worker, the sandbox on) on 127.0.0.1; the pages need no
JavaScript (a submission's page refreshes itself while it is being graded).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import REPO, sample
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service as ChromeService
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select
from sqlalchemy import select

from grader.service.accounts import add_user
from grader.service.db import make_engine, migrate, session_factory
from grader.service.models import Result
from grader.service.testing import make_user, serving, wait_for

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync")  # fmt: skip

pytestmark = [
    pytest.mark.skipif(
        not (CHROMIUM.is_file() and CHROMEDRIVER.is_file()),
        reason="needs Debian's chromium and chromium-driver; scripts/setup installs them",
    ),
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox's uid switch needs root here (as in CI)"),
]


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={tmp_path_factory.mktemp('profile')}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=ChromeService(str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()


def submit(driver: webdriver.Chrome, button: str) -> None:
    """Click a form's button and wait until the browser has loaded the next page.

    The old page is marked with a script variable that a new page does not have; while the browser is
    between pages, a script call may fail, which only means "not yet"."""
    driver.execute_script("window.__before_submit = true")
    driver.find_element(By.ID, button).click()

    def arrived() -> bool:
        try:
            return bool(
                driver.execute_script(
                    "return window.__before_submit === undefined && document.readyState === 'complete'"
                )
            )
        except WebDriverException:
            return False

    wait_for(arrived, 30, f"the next page after clicking #{button}")


def log_in(driver: webdriver.Chrome, base: str, username: str, password: str) -> None:
    driver.delete_all_cookies()
    driver.get(f"{base}/login")
    driver.find_element(By.ID, "username").send_keys(username)
    driver.find_element(By.ID, "password").send_keys(password)
    submit(driver, "login")


def upload(driver: webdriver.Chrome, base: str, notebook: Path) -> int:
    """Upload from the lesson page, wait until graded (the page refreshes itself); return the id."""
    driver.get(f"{base}/lessons/lesson04")
    driver.find_element(By.ID, "notebook").send_keys(str(notebook))
    submit(driver, "submit")

    def graded() -> bool:
        try:
            status = driver.find_element(By.ID, "status").get_attribute("data-status")
            return status == "graded" and bool(driver.find_elements(By.ID, "feedback"))
        except WebDriverException:  # the page is reloading itself: not yet
            return False

    wait_for(graded, 120, "the submission to be graded")
    return int(driver.current_url.rstrip("/").rsplit("/", 1)[1])


def feedback(driver: webdriver.Chrome) -> str:
    return driver.find_element(By.ID, "feedback").text


def test_students_and_an_instructor_in_a_browser(browser, tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'course.db'}")
    migrate(engine)
    factory = session_factory(engine)
    with factory.begin() as session:
        code = add_user(session, "2026001", "student", "张三").code
    make_user(factory, "2026002", "student", "second-pass")
    make_user(factory, "prof", "instructor", "teacher-pass")
    with serving(tmp_path, REPO) as (_proc, base):
        # 1. First login with the invitation code, a password, the reference notebook: 10/10.
        log_in(browser, base, "2026001", code)
        assert browser.current_url.endswith("/password"), browser.page_source
        browser.find_element(By.ID, "new").send_keys("first-pass-1")
        browser.find_element(By.ID, "again").send_keys("first-pass-1")
        submit(browser, "save")
        assert browser.current_url.endswith("/lessons")
        first = upload(browser, base, sample("reference"))
        assert "总分 10 / 10，通过" in feedback(browser)

        # 2. A vetoed answer: the veto, the sentence that triggered it and why.
        vetoed = upload(browser, base, sample("vetoed-answer"))
        with factory() as session:
            veto = json.loads(session.scalars(select(Result.data).where(Result.submission_id == vetoed)).one())[
                "vetoes"
            ][0]
        shown = feedback(browser)
        assert "一票否决" in shown and "未通过" in shown
        assert veto["message"][:30] in shown and veto["evidence"][:20] in shown

        # 3. The instructor lifts the veto with a reason; the student sees the change.
        log_in(browser, base, "prof", "teacher-pass")
        browser.get(f"{base}/submissions/{vetoed}")
        Select(browser.find_element(By.ID, "override-target")).select_by_value(f"veto:{veto['id']}")
        browser.find_element(By.ID, "override-reason").send_keys("答疑时确认是在讨论 ZeRO 的情形")
        submit(browser, "override")
        assert "答疑时确认是在讨论 ZeRO 的情形" in browser.find_element(By.ID, "audit").text
        log_in(browser, base, "2026001", "first-pass-1")
        browser.get(f"{base}/submissions/{vetoed}")
        after = feedback(browser)
        assert "教师调整" in after and "答疑时确认是在讨论 ZeRO 的情形" in after and "，通过" in after

        # 4. A second student sees none of it.
        log_in(browser, base, "2026002", "second-pass")
        assert "未提交" in browser.find_element(By.TAG_NAME, "main").text
        browser.get(f"{base}/lessons/lesson04")
        assert browser.find_elements(By.ID, "no-history")
        for sub in (first, vetoed):
            for path in (f"/submissions/{sub}", f"/api/submissions/{sub}/status"):
                browser.get(base + path)
                text = browser.find_element(By.TAG_NAME, "body").text
                assert "张三" not in text and "总分" not in text and "graded" not in text
        browser.get(f"{base}/submissions/{first}")
        assert browser.find_element(By.TAG_NAME, "h1").text == "页面不存在"
