"""Fixtures of the browser tests: the built site served on the loopback, and one Chromium per test file."""

import pytest
from playwright.sync_api import sync_playwright

from helpers import CHROMIUM_FLAGS, chromium, served


@pytest.fixture(scope="module")
def base_url(site_dir):
    """The URL of the built site, served for the test file's duration."""
    with served(site_dir) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium, started once per test file."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium(), args=CHROMIUM_FLAGS)
        yield browser
        browser.close()
