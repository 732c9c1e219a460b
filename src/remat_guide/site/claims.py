"""A page's numbers and words for its prose, each checked against what the sentence says of it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from remat_guide import _validation as validation

__all__ = ["ClaimError", "claim"]


class ClaimError(AssertionError):
    """What a page's sentence says of a value no longer holds: the build stops."""


def claim(key: str, value: Any, *, holds: bool | Callable[[Any], Any] = True, says: str = "") -> Any:
    """Puts a value into the page's prose under ``key``, once what the prose says of it is checked.

    A page writes the sentence, the value it quotes and the check of the sentence in one
    place: the cell right above the paragraph that reads ``{glue:text}`key``` (numbers,
    with a format such as ``:.2f``) or ``{glue:md}`key``` (words). A value of type
    ``str`` is glued as Markdown, any other as it is. When ``holds`` is false the build
    fails with the sentence's claim, instead of publishing a sentence its output contradicts.

    Args:
        key: The name the prose reads the value by (letters, digits and ``_``).
        value: The number or words to quote.
        holds: The check of what the sentence claims: a bool computed beside it, or a
            function of ``value`` that returns whether the claim holds.
        says: The claim in words, for the error message (``"about 1.3x the FLOPs"``).

    Returns:
        ``value``, so that a cell can go on using it.

    Raises:
        ClaimError: If the claim does not hold (an ``AssertionError``, like the page's
            other checks).
        TypeError: If ``key`` or ``says`` is not a str, or ``holds`` is neither a bool
            nor callable.
        ValueError: If ``key`` is empty or holds characters other than letters, digits
            and ``_``.
        ModuleNotFoundError: If MyST-NB, which publishes the value to the page, is not
            installed (the site's requirements install it).

    Examples:
        In a page's cell (outside a notebook nothing is published):

        >>> import numpy as np
        >>> from remat_guide.site.claims import claim
        >>> claim("speed_up", 1.31, holds=lambda r: 1.2 < r < 1.4, says="about 1.3x")
        1.31
        >>> claim("share", np.float64(0.25), holds=np.bool_(True))  # NumPy scalars become Python's
        0.25
        >>> claim("speed_up", 1.9, holds=lambda r: 1.2 < r < 1.4, says="about 1.3x")
        Traceback (most recent call last):
        ...
        remat_guide.site.claims.ClaimError: the prose says of speed_up: about 1.3x; the value is 1.9
    """
    validation.string(key, "key")
    if not key or not key.replace("_", "a").isalnum() or not key.isascii():
        raise ValueError(f"key must be letters, digits and '_', got {key!r}")
    validation.string(says, "says")
    if isinstance(value, np.generic):  # a NumPy or pandas scalar glues as the Python number it holds
        value = value.item()
    if isinstance(holds, (bool, np.bool_)):
        ok = bool(holds)
    elif callable(holds):
        ok = bool(holds(value))
    else:
        raise TypeError(f"holds must be a bool or a function of the value, got {type(holds).__name__}")
    if not ok:
        claim_text = says or "(no words given)"
        raise ClaimError(f"the prose says of {key}: {claim_text}; the value is {value!r}")
    _publish(key, value)
    return value


def _publish(key: str, value: Any) -> None:
    """Glues the value into a running page; outside a notebook kernel there is no page to glue to."""
    try:
        from IPython import get_ipython
    except ModuleNotFoundError:
        return
    if get_ipython() is None:
        return
    try:
        from IPython.display import Markdown
        from myst_nb import glue
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            "claim() publishes values with MyST-NB's glue: install the site's requirements "
            "(pip install -r requirements.txt)") from error
    glue(key, Markdown(value) if isinstance(value, str) else value, display=False)
