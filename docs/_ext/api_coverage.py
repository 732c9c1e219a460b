"""Sphinx extension: the build fails when the installed JAX has a checkpoint API item the reference lacks."""

from __future__ import annotations

from typing import Any

import jax
from sphinx.util import logging as sphinx_logging

from remat_guide.site.api_items import undocumented

logger = sphinx_logging.getLogger(__name__)


def check_environment(app: Any, env: Any) -> list[str]:
    """Sphinx ``env-updated`` hook: warn once per undocumented item (``-W`` fails the build).

    ``env-updated`` runs on every build, also when no page changed, so a JAX upgrade
    (or an item injected into JAX) is caught even by an incremental build.
    """
    for item in undocumented(env.domaindata["std"]["labels"]):
        logger.warning(
            "%s is not documented: the reference has no label (%s)= above a heading for it "
            "(JAX %s)", item.qualname, item.label, jax.__version__,
            type="remat_guide", subtype="api_coverage")
    return []


def setup(app: Any) -> dict[str, Any]:
    """Register the guard with Sphinx."""
    app.connect("env-updated", check_environment)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
