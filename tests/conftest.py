"""Shared fixtures: where the built site is."""

import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def site_dir() -> pathlib.Path:
    """The built site: $REMAT_GUIDE_SITE (relative to the checkout), by default _build/html."""
    site = ROOT / os.environ.get("REMAT_GUIDE_SITE", "_build/html")
    assert (site / "index.html").is_file(), f"{site} holds no built site: run `make html` first"
    return site
