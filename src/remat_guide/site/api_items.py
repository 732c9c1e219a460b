"""The items of JAX's checkpoint API and which of them the reference documents (for the coverage guard)."""

from __future__ import annotations

import dataclasses
import inspect
import types
from collections.abc import Iterable

import jax
import jax.ad_checkpoint

__all__ = ["ApiItem", "api_items", "undocumented"]

GROUPS = ("parameter", "policy", "export")


@dataclasses.dataclass(frozen=True)
class ApiItem:
    """One public item of the ``jax.checkpoint`` API and the label that documents it.

    Attributes:
        group: ``"parameter"`` (of ``jax.checkpoint``), ``"policy"`` (a name in
            ``jax.checkpoint_policies``) or ``"export"`` (of ``jax.ad_checkpoint``).
        name: The item's name.
        label: The MyST label the reference must define for it: ``param-<name>``,
            ``policy-<name>`` or ``api-<name>``.

    Raises:
        TypeError: If a field is not a str.
        ValueError: If ``group`` is unknown or ``name`` is empty.
    """

    group: str
    name: str
    label: str

    def __post_init__(self) -> None:
        for field in ("group", "name", "label"):
            if not isinstance(getattr(self, field), str):
                raise TypeError(f"ApiItem.{field} must be a str, got "
                                f"{type(getattr(self, field)).__name__}")
        if self.group not in GROUPS:
            raise ValueError(f"ApiItem.group must be one of {GROUPS}, got {self.group!r}")
        if not self.name:
            raise ValueError("ApiItem.name must not be empty")

    @property
    def qualname(self) -> str:
        """How a reader writes the item, such as ``jax.checkpoint(prevent_cse=...)``."""
        if self.group == "parameter":
            return f"jax.checkpoint({self.name}=...)" if self.name != "fun" else "jax.checkpoint(fun)"
        if self.group == "policy":
            return f"jax.checkpoint_policies.{self.name}"
        return f"jax.ad_checkpoint.{self.name}"


def api_items() -> list[ApiItem]:
    """Every parameter, standard policy and ``jax.ad_checkpoint`` export of the installed JAX.

    Read afresh at each call: the parameters from ``inspect.signature(jax.checkpoint)``,
    the policies from ``vars(jax.checkpoint_policies)``, the exports from the public,
    non-module names of ``jax.ad_checkpoint``.

    Examples:
        >>> from remat_guide.site.api_items import api_items
        >>> items = api_items()
        >>> [item.label for item in items if item.group == "parameter"][:2]
        ['param-fun', 'param-prevent_cse']
        >>> "policy-dots_saveable" in {item.label for item in items}
        True
    """
    items = [ApiItem("parameter", name, f"param-{name}")
             for name in inspect.signature(jax.checkpoint).parameters]
    items += [ApiItem("policy", name, f"policy-{name}")
              for name in vars(jax.checkpoint_policies) if not name.startswith("_")]
    items += [ApiItem("export", name, f"api-{name}")
              for name, value in sorted(vars(jax.ad_checkpoint).items())
              if not name.startswith("_") and not isinstance(value, types.ModuleType)]
    return items


def undocumented(documented_labels: Iterable[str]) -> list[ApiItem]:
    """The API items whose label is not among ``documented_labels``.

    Args:
        documented_labels: The labels the reference defines (an iterable of strings,
            such as the keys of Sphinx's ``std`` label table); case does not matter.

    Returns:
        The missing items, in the order of :func:`api_items`; empty when all are documented.

    Raises:
        TypeError: If ``documented_labels`` is not an iterable, is a single string, or
            holds a non-string.

    Examples:
        >>> from remat_guide.site.api_items import api_items, undocumented
        >>> everything = [item.label for item in api_items()]
        >>> undocumented(everything)
        []
        >>> [item.label for item in undocumented(everything[1:])]
        ['param-fun']
    """
    if isinstance(documented_labels, str):
        raise TypeError("documented_labels must be an iterable of labels, not a single string")
    if not isinstance(documented_labels, Iterable):
        raise TypeError(f"documented_labels must be an iterable of labels, got "
                        f"{type(documented_labels).__name__}")
    labels = set(documented_labels)
    bad = [label for label in labels if not isinstance(label, str)]
    if bad:
        raise TypeError(f"documented_labels must hold strings, got {bad[0]!r}")
    # Sphinx stores labels in lower case, so (api-Saveable)= is found as api-saveable.
    folded = {label.lower() for label in labels}
    return [item for item in api_items() if item.label.lower() not in folded]
