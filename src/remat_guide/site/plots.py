"""The site's plots: one colour and one marker per policy on every page, legible on a phone."""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["MARKER_SIZE", "PolicyStyle", "draw_points", "draw_series", "legend_below", "policy_style"]

# Okabe and Ito's palette (distinguishable with the common colour-vision deficiencies),
# then a few darker tones for the rarer series. Dark mode inverts the plots with hues kept.
_BLACK, _ORANGE, _SKY, _GREEN, _YELLOW, _BLUE, _VERMILION, _PURPLE = (
    "#000000", "#E69F00", "#56B4E9", "#009E73", "#C9B000", "#0072B2", "#D55E00", "#CC79A7")
_GREY, _BROWN, _TEAL, _OLIVE = "#7F7F7F", "#8C564B", "#17808A", "#6B6B00"


@dataclasses.dataclass(frozen=True)
class PolicyStyle:
    """How one policy (or strategy) is drawn on every plot of the site.

    Attributes:
        color: A hex colour.
        marker: A matplotlib marker code.
    """

    color: str
    marker: str


# Each name the site plots has its own pair of colour and marker, and no two names share a
# pair; the names that one plot draws together also differ in colour and in marker, so that
# either alone tells them apart. Aliases share their policy's style (per-layer checkpointing
# is nothing_saveable on each layer). Line markers ("1", "+", "x") are not used: at a phone's
# size they vanish.
_STYLES: dict[str, PolicyStyle] = {
    "no checkpoint": PolicyStyle(_BLACK, "s"),
    "everything_saveable": PolicyStyle(_SKY, "D"),
    "dots_saveable": PolicyStyle(_BLUE, "o"),
    "checkpoint_dots": PolicyStyle(_BLUE, "o"),
    "dots_with_no_batch_dims_saveable": PolicyStyle(_GREEN, "^"),
    "checkpoint_dots_with_no_batch_dims": PolicyStyle(_GREEN, "^"),
    "nothing_saveable": PolicyStyle(_VERMILION, "v"),
    "per-layer checkpoint": PolicyStyle(_VERMILION, "v"),
    "offload_dot_with_no_batch_dims": PolicyStyle(_PURPLE, "P"),
    "save_only_these_names": PolicyStyle(_ORANGE, "p"),
    "save_any_names_but_these": PolicyStyle(_BROWN, "h"),
    "save_anything_except_these_names": PolicyStyle(_BROWN, "h"),
    "save_and_offload_only_these_names": PolicyStyle(_PURPLE, "X"),
    "save_from_both_policies": PolicyStyle(_TEAL, "H"),
    "checkpoint_dot_policy": PolicyStyle(_YELLOW, "d"),
    # The depth page's strategies.
    "recursive, sqrt(N) (2 levels)": PolicyStyle(_BLUE, "h"),
    "recursive, binary (log2 N levels)": PolicyStyle(_PURPLE, "D"),
    # MaxText's remat_policy presets, and the planner's answers.
    "save_out_proj": PolicyStyle(_ORANGE, "P"),
    "save_qkv_proj": PolicyStyle(_PURPLE, "<"),
    "save_dot_except_mlp": PolicyStyle(_BROWN, "X"),
    "qkv_proj_offloaded": PolicyStyle(_SKY, ">"),
    "minimal_offloaded": PolicyStyle(_OLIVE, "d"),
    "plan_names": PolicyStyle(_TEAL, "*"),
    # The cloud of other sets of names: small dots (the point marker), behind the rest.
    "set of names": PolicyStyle(_GREY, "."),
}
# Names that other plots spell differently: a names policy written as "names: ..." or as the
# factory's call, an offloading one as "offload ...".
_PREFIXES = (
    ("save_only_these_names(", "save_only_these_names"),
    ("names:", "save_only_these_names"),
    ("save ", "save_only_these_names"),
    ("save_and_offload_only_these_names(", "save_and_offload_only_these_names"),
    ("offload_dot_with_no_batch_dims(", "offload_dot_with_no_batch_dims"),
    ("offload ", "save_and_offload_only_these_names"),
    ("keep ", "save_and_offload_only_these_names"),
)
# Other names get a pair that no name above has, derived from the name itself.
_SPARE = tuple(
    PolicyStyle(color, marker)
    for color in (_GREY, _BROWN, _TEAL, _OLIVE, _YELLOW, _SKY)
    for marker in ("H", "8", "d", "<", ">", "p", "P", "X", "*")
    if PolicyStyle(color, marker) not in set(_STYLES.values()))
MARKER_SIZE = 8  # in points, the same on every plot so that a marker looks the same


def policy_style(name: str) -> PolicyStyle:
    """The colour and marker of a policy, a strategy or a preset on every plot of the site.

    A standard policy's name (either alias, or several joined by ``" / "`` as
    :func:`remat_guide.policy_label` writes them) and the other series the site plots
    have fixed styles; a names policy written as a call (``save_only_these_names(...)``)
    takes its factory's. Any other name gets a style derived from the name itself, the
    same on every build and every page, and a pair of colour and marker that no name
    with a fixed style has.

    Args:
        name: The series' name, as the plot's legend shows it.

    Returns:
        Its colour and marker.

    Raises:
        TypeError: If ``name`` is not a string.

    Examples:
        >>> policy_style("nothing_saveable") == policy_style("per-layer checkpoint")
        True
        >>> policy_style("dots_saveable / checkpoint_dots")
        PolicyStyle(color='#0072B2', marker='o')
        >>> policy_style("save_only_these_names('attn_out')").marker
        'p'
    """
    if not isinstance(name, str):
        raise TypeError(f"name: expected a string, got {type(name).__name__}")
    first = name.split(" / ")[0].strip()
    if first in _STYLES:
        return _STYLES[first]
    for prefix, family in _PREFIXES:
        if first.startswith(prefix):
            return _STYLES[family]
    return _SPARE[zlib.crc32(first.encode()) % len(_SPARE)]


def draw_points(ax: Any, points: Iterable[tuple[str, float, float]], *,
                labels: dict[str, str] | None = None, nudge: float = 9.0,
                size: float = MARKER_SIZE) -> list[Any]:
    """Draws one marker per (name, x, y) in the name's style, nudging points that coincide.

    Points that land on the same spot (to within a marker) are spread sideways by
    ``nudge`` points each, so that every one stays visible with its legend entry. Each
    marker's SVG group is named ``policy:<name>``, so a test can read the style back
    from the drawn file.

    Args:
        ax: A matplotlib Axes.
        points: The points: a series name and its coordinates in data units.
        labels: Legend text per name, where it differs from the name.
        nudge: The sideways spread of coinciding points, in typographic points.
        size: The marker size in points.

    Returns:
        The matplotlib Line2D artists, in the order of ``points``.
    """
    import matplotlib.transforms as transforms

    points = list(points)
    labels = labels or {}
    # Points closer than a marker on screen form a group; each group is spread around its spot.
    to_pixels = ax.transData.transform
    pixel = [to_pixels((x, y)) for _, x, y in points]
    groups: list[list[int]] = []
    for i, (px, py) in enumerate(pixel):
        for group in groups:
            gx, gy = pixel[group[0]]
            if abs(px - gx) < size and abs(py - gy) < size:
                group.append(i)
                break
        else:
            groups.append([i])
    offsets = {}
    for group in groups:
        for rank, i in enumerate(group):
            offsets[i] = (rank - (len(group) - 1) / 2) * nudge
    artists = []
    for i, (name, x, y) in enumerate(points):
        style = policy_style(name)
        shift = transforms.offset_copy(ax.transData, fig=ax.figure, x=offsets[i], y=0,
                                       units="points")
        (line,) = ax.plot([x], [y], linestyle="none", marker=style.marker, color=style.color,
                          markersize=size, label=labels.get(name, name), transform=shift,
                          zorder=3)
        line.set_gid(f"policy:{name}")
        artists.append(line)
    return artists


def draw_series(ax: Any, name: str, xs: Sequence[float], ys: Sequence[float], *,
                label: str | None = None, size: float = MARKER_SIZE) -> Any:
    """Draws a line through (xs, ys) in a series' colour, with its marker at each point.

    Args:
        ax: A matplotlib Axes.
        name: The series' name (its style comes from :func:`policy_style`).
        xs: The x coordinates.
        ys: The y coordinates.
        label: The legend text, if not the name.
        size: The marker size in points.

    Returns:
        The matplotlib Line2D.
    """
    style = policy_style(name)
    (line,) = ax.plot(xs, ys, marker=style.marker, color=style.color, markersize=size,
                      label=label or name)
    line.set_gid(f"policy:{name}")
    return line


def legend_below(fig: Any, handles: Sequence[Any] | None = None,
                 labels: Sequence[str] | None = None, ncols: int | None = None, *,
                 grow: bool = True) -> Any:
    """Puts a figure's legend under its plots, in as many columns as its width holds.

    The figure must use the constrained layout (``layout="constrained"``), which makes
    room for the legend. With ``grow``, the figure grows by the legend's height, so that
    the plots keep the height the figure was given; the site's figures are narrow (a
    phone shows them at about their own size), so a long legend takes one column and
    several rows.

    Args:
        fig: A matplotlib Figure.
        handles: The legend's artists; by default those of the figure's first Axes.
        labels: Their text; by default the artists' labels.
        ncols: The number of columns; by default the most that fit the figure's width.
        grow: Whether to make the figure taller by the legend's height.

    Returns:
        The Legend.

    Raises:
        ValueError: If ``ncols`` is not a positive number.

    Examples:
        >>> import matplotlib.pyplot as plt
        >>> fig, ax = plt.subplots(figsize=(4.8, 3), layout="constrained")
        >>> for name in ("no checkpoint", "dots_with_no_batch_dims_saveable"):
        ...     _ = draw_series(ax, name, [1, 2], [3, 4])
        >>> legend = legend_below(fig)
        >>> bool(legend.get_window_extent().width <= fig.bbox.width)
        True
        >>> bool(fig.get_figheight() > 3)
        True
        >>> plt.close(fig)
    """
    if ncols is not None and (not isinstance(ncols, int) or ncols < 1):
        raise ValueError(f"ncols: expected a positive number of columns, got {ncols!r}")
    if handles is None:
        handles, found = fig.axes[0].get_legend_handles_labels()
        labels = found if labels is None else labels
    elif labels is None:
        labels = [handle.get_label() for handle in handles]
    handles, labels = list(handles), list(labels)
    width = fig.get_figwidth() * fig.dpi
    for columns in ([ncols] if ncols else range(len(labels), 0, -1)):
        legend = fig.legend(handles, labels, loc="outside lower center", ncols=columns)
        if columns == 1 or legend.get_window_extent().width <= width:
            break
        legend.remove()
    if grow:
        fig.set_figheight(fig.get_figheight() + legend.get_window_extent().height / fig.dpi)
    return legend
