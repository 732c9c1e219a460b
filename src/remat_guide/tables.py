"""Result tables as HTML for notebooks and the site: right-aligned numbers in labelled units."""

from __future__ import annotations

import hashlib
import html
import re
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["COLUMN_UNITS", "Table", "unit_for", "word_breaks"]

BYTE_UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("B", 1))
FLOP_UNITS = (("TFLOP", 10**12), ("GFLOP", 10**9), ("MFLOP", 10**6), ("kFLOP", 10**3), ("FLOP", 1))
SECOND_UNITS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6))

# How a numeric column is shown: "bytes", "flops" and "seconds" in one unit per column,
# chosen from the column's largest value; "ratio" as a multiple; "count" as an integer
# with separators.
COLUMN_UNITS = ("bytes", "flops", "seconds", "ratio", "count")
_UNITS = {"bytes": BYTE_UNITS, "flops": FLOP_UNITS, "seconds": SECOND_UNITS}


def unit_for(values: Iterable[float], kind: str) -> tuple[str, int]:
    """The unit in which a column of byte or FLOP counts, or of seconds, reads best.

    Args:
        values: The column's values.
        kind: ``"bytes"`` (B, KiB, MiB, GiB), ``"flops"`` (FLOP up to TFLOP) or
            ``"seconds"`` (µs, ms, s).

    Returns:
        The pair of the unit's name and its size in bytes or FLOPs, for the largest unit
        that the largest value reaches at least once.

    Raises:
        ValueError: If ``kind`` is not ``"bytes"``, ``"flops"`` or ``"seconds"``.

    Examples:
        >>> from remat_guide.tables import unit_for
        >>> unit_for([512, 3 * 2**20], "bytes")
        ('MiB', 1048576)
        >>> unit_for([0], "flops")
        ('FLOP', 1)
        >>> unit_for([0.25, 0.0031], "seconds")
        ('ms', 0.001)
    """
    if kind not in _UNITS:
        raise ValueError(f"kind must be 'bytes', 'flops' or 'seconds', got {kind!r}")
    units = _UNITS[kind]
    largest = max((abs(v) for v in values if not pd.isna(v)), default=0)
    for name, size in units:
        if largest >= size:
            return name, size
    return units[-1]


# Decimals shown at least, and at most: enough for any two different integers of bytes
# (2**-30 GiB needs 30) or FLOPs (10**-12 TFLOP needs 12) to differ, and ratios to 9 places.
_MIN_DECIMALS = {"bytes": 2, "flops": 2, "seconds": 1, "ratio": 3}
_MAX_DECIMALS = {"bytes": 30, "flops": 12, "seconds": 3, "ratio": 9}


def _formatter(kind: str, size: int, decimals: int) -> Any:
    if kind == "ratio":
        return lambda v: "" if pd.isna(v) else f"{v:.{decimals}f}×"
    if kind == "count" or (kind != "seconds" and size == 1):
        return lambda v: "" if pd.isna(v) else f"{int(v):,}"
    return lambda v: "" if pd.isna(v) else _in_unit(v, size, decimals)


def _in_unit(value: Any, size: int, decimals: int) -> str:
    """``value / size`` with ``decimals`` decimals; exact for integers however large (floats lose past 2**53)."""
    if not isinstance(value, (int, np.integer)):
        return f"{value / size:,.{decimals}f}"
    scaled = round(Fraction(int(value) * 10**decimals, size))
    whole, part = divmod(abs(scaled), 10**decimals)
    sign = "-" if scaled < 0 else ""
    return f"{sign}{whole:,}.{part:0{decimals}d}" if decimals else f"{sign}{whole:,}"


def _column_formatter(values: pd.Series, kind: str) -> tuple[str, Any]:
    """The unit and formatter of a column: the fewest decimals that keep different values different."""
    name, size = unit_for(values, kind) if kind in _UNITS else ("", 1)
    decimals = _MIN_DECIMALS.get(kind, 0)
    distinct = {v for v in values if not pd.isna(v)}
    while True:
        formatter = _formatter(kind, size, decimals)
        if (kind == "count" or (kind in ("bytes", "flops") and size == 1) or decimals >= _MAX_DECIMALS[kind]
                or len({formatter(v) for v in distinct}) == len(distinct)):
            return name, formatter
        decimals += 1


def _text(value: Any, html_cell: bool) -> str:
    """A cell as plain text: HTML cells lose their tags; a missing value is empty."""
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return ""
    text = str(value)
    return html.unescape(re.sub(r"<[^>]+>", "", text)) if html_cell else text


_WORD_BREAK = re.compile(r"(?<=_)(?=\w)|(?<=[a-z])(?=[A-Z])")


def word_breaks(text: str) -> str:
    """HTML text with a line-break opportunity after each ``_`` and inside camel case.

    A long name in a table cell then wraps between its words
    (``save_only_<wbr>these_<wbr>names``, ``Save<wbr>Only<wbr>These<wbr>Names``),
    never between two letters of one, and the table fits a narrower column.

    Args:
        text: HTML text (already escaped).

    Returns:
        The text with ``<wbr>`` inserted.

    Examples:
        >>> word_breaks("save_only_these_names")
        'save_<wbr>only_<wbr>these_<wbr>names'
        >>> word_breaks("SaveOnlyTheseNames")
        'Save<wbr>Only<wbr>These<wbr>Names'
    """
    return _WORD_BREAK.sub("<wbr>", text)


def _breakable(value: Any) -> str:
    return word_breaks(html.escape(str(value)))


class Table:
    """A table to show: the values as a DataFrame, rendered as HTML in a notebook.

    Numeric columns are right-aligned; byte and FLOP columns are shown in one unit each,
    named in the header (``temp (MiB)``), while the ``frame`` attribute keeps the exact values.
    Byte, FLOP and ratio columns show two decimals (a ratio three), or as many more as it
    takes for different values never to read the same. ``str()`` gives the same table as
    plain text.

    Args:
        frame: The values, one row per line of the table; the index is not shown.
        units: For each numeric column to format, one of :data:`COLUMN_UNITS`.
        cell_classes: CSS classes for cells, a DataFrame shaped like ``frame``
            (empty strings for none); the site's stylesheet colours some of them.
        caption: A caption shown above the table.
        legend: For a key shown above the table, each CSS class of ``cell_classes``
            mapped to what it means.
        html_columns: The columns whose cells are HTML (links, code), shown as they
            are; every other cell is escaped.
        table_class: Further CSS classes of the ``<table>`` element.

    Raises:
        TypeError: If ``frame`` is not a DataFrame or ``cell_classes`` is given and is not one.
        ValueError: If ``units`` names a column that ``frame`` lacks or a kind not in
            :data:`COLUMN_UNITS`, or ``cell_classes`` is not shaped like ``frame``.

    Examples:
        >>> import pandas as pd
        >>> from remat_guide.tables import Table
        >>> table = Table(pd.DataFrame({"policy": ["a", "b"], "temp": [2**20, 3 * 2**20]}),
        ...               units={"temp": "bytes"})
        >>> print(table)
        policy  temp (MiB)
        ------  ----------
        a             1.00
        b             3.00
        >>> '<td class="data row1 col1 num" >3.00</td>' in table._repr_html_()
        True
        >>> print(Table(pd.DataFrame({"temp": [2**20, 2**20 + 2**10]}), units={"temp": "bytes"}))
        temp (MiB)
        ----------
             1.000
             1.001
    """

    def __init__(self, frame: pd.DataFrame, *, units: Mapping[str, str] | None = None,
                 cell_classes: pd.DataFrame | None = None, caption: str | None = None,
                 legend: Mapping[str, str] | None = None, html_columns: Iterable[str] = (),
                 table_class: str = "") -> None:
        if not isinstance(frame, pd.DataFrame):
            raise TypeError(f"frame must be a pandas DataFrame, got {type(frame).__name__}")
        units = dict(units or {})
        for column, kind in units.items():
            if column not in frame.columns:
                raise ValueError(f"units names {column!r}, which frame lacks; it has {list(frame.columns)}")
            if kind not in COLUMN_UNITS:
                raise ValueError(f"units[{column!r}] must be one of {COLUMN_UNITS}, got {kind!r}")
        if cell_classes is not None:
            if not isinstance(cell_classes, pd.DataFrame):
                raise TypeError(f"cell_classes must be a DataFrame, got {type(cell_classes).__name__}")
            if cell_classes.shape != frame.shape:
                raise ValueError(f"cell_classes has shape {cell_classes.shape}, frame has {frame.shape}")
        self.frame = frame
        self.units = units
        self.cell_classes = cell_classes
        self.caption = caption
        self.legend = dict(legend or {})
        self.html_columns = tuple(html_columns)
        for column in self.html_columns:
            if column not in frame.columns:
                raise ValueError(f"html_columns names {column!r}, which frame lacks")
        self.table_class = table_class

    def _shown(self) -> tuple[pd.DataFrame, dict[str, Any]]:
        headers, formatters = {}, {}
        for column, kind in self.units.items():
            name, formatter = _column_formatter(self.frame[column].dropna(), kind)
            headers[column] = f"{column} ({name})" if name else column
            formatters[headers[column]] = formatter
        return self.frame.rename(columns=headers), formatters

    def _html_headers(self, shown: pd.DataFrame) -> list[str]:
        """The headers, as ``shown`` names them, of the columns whose cells are HTML."""
        return [header for column, header in zip(self.frame.columns, shown.columns)
                if column in self.html_columns]

    def _repr_html_(self) -> str:
        shown, formatters = self._shown()
        classes = pd.DataFrame("", index=shown.index, columns=shown.columns)
        if self.cell_classes is not None:
            classes = pd.DataFrame(self.cell_classes.to_numpy(), index=shown.index, columns=shown.columns)
        numeric = [i for i, column in enumerate(shown.columns) if column in formatters]
        for i in numeric:
            classes.iloc[:, i] = (classes.iloc[:, i] + " num").str.strip()
        # The id is a hash of the content, so that it is the same on every build.
        digest = hashlib.sha1(shown.to_csv().encode() + (self.caption or "").encode()).hexdigest()[:10]
        raw = self._html_headers(shown)
        escaped = [c for c in shown.columns if c not in formatters and c not in raw]
        styler = shown.style.hide(axis="index")
        if formatters:
            styler = styler.format(formatters, subset=list(formatters))
        if escaped:
            styler = styler.format(_breakable, subset=escaped)
        table_class = f"remat-table {self.table_class}".strip()
        styler = (styler.set_td_classes(classes).set_uuid(digest)
                  .set_table_attributes(f'class="{table_class}"')
                  .set_table_styles([{"selector": f"th.col{i}", "props": "text-align: right;"}
                                     for i in numeric]))
        styler.cell_ids = False
        key = "".join(f'<span class="{html.escape(css)}">{html.escape(text)}</span>'
                      for css, text in self.legend.items())
        key = f'<p class="remat-legend">{key}</p>' if key else ""
        # The caption sits above the scrolling box, so that a phone shows all of it.
        caption = (f'<p class="remat-table-caption">{html.escape(self.caption)}</p>'
                   if self.caption else "")
        return f'{caption}{key}<div class="remat-table-scroll">{styler.to_html()}</div>'

    def __str__(self) -> str:
        shown, formatters = self._shown()
        raw = self._html_headers(shown)
        columns = [str(column) for column in shown.columns]
        cells = [[formatters[column](value) if column in formatters
                  else _text(value, html_cell=column in raw) for value in shown[column]]
                 for column in shown.columns]
        widths = [max([len(header), *map(len, column)]) for header, column in zip(columns, cells)]
        numeric = [column in formatters for column in shown.columns]

        def line(values: Iterable[str]) -> str:
            return "  ".join(value.rjust(width) if right else value.ljust(width)
                             for value, width, right in zip(values, widths, numeric)).rstrip()

        lines = [line(columns), "  ".join("-" * width for width in widths),
                 *(line(row) for row in zip(*cells))]
        if self.legend:
            lines.insert(0, "key: " + ", ".join(self.legend.values()))
        if self.caption:
            lines.insert(0, self.caption)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)
