"""Result tables as HTML for notebooks and the site: right-aligned numbers in labelled units."""

from __future__ import annotations

import hashlib
import html
import math
import numbers
import re
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

__all__ = ["COLUMN_UNITS", "PHONE_CHARACTERS", "SIGNIFICANT", "Table", "human_bytes", "phone_columns", "unit_for",
           "word_breaks"]

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


# Numbers show four significant figures (ratios at most three decimals), integers of
# bytes, FLOPs and counts in full. Two different values of a column that print alike are
# marked, and the table says within what they are equal.
SIGNIFICANT = 4
_RATIO_DECIMALS = 3
_APPROX_CLASS = "remat-approx"


def _decimals(value: float, kind: str) -> int:
    """The decimals that show ``value`` to :data:`SIGNIFICANT` figures (ratios: at most three)."""
    decimals = 0
    if value:
        decimals = max(0, SIGNIFICANT - 1 - math.floor(math.log10(abs(value))))
        # Rounding may carry into a new leading digit (9.9996 -> 10.00): one decimal fewer.
        rounded = round(abs(value), decimals)
        if rounded and math.floor(math.log10(rounded)) > math.floor(math.log10(abs(value))):
            decimals = max(0, decimals - 1)
    return min(decimals, _RATIO_DECIMALS) if kind == "ratio" else decimals


# A value under a hundredth of its column's unit would print as 0.00 and a tail of digits
# (0.00006485 MiB): it shows in its own unit instead, named in the cell (68 B).
_TINY = 1e-2


def _formatter(kind: str, size: float) -> Any:
    if kind == "count" or (kind != "seconds" and kind != "ratio" and size == 1):
        return lambda v: "" if pd.isna(v) else f"{int(v):,}"
    suffix = "×" if kind == "ratio" else ""

    def format_value(v: Any) -> str:
        if pd.isna(v):
            return ""
        scaled = float(v) / size
        if kind in _UNITS and 0 < abs(scaled) < _TINY:
            name, own = unit_for([v], kind)
            if own != size:
                return _formatter(kind, own)(v) + f" {name}"
        return f"{scaled:,.{_decimals(scaled, kind)}f}{suffix}"

    return format_value


def human_bytes(nbytes: int) -> str:
    """A byte count for prose and summaries: in the largest unit it reaches, four significant figures.

    Args:
        nbytes: The count.

    Returns:
        The count with its unit, such as ``1.047 GiB``; under 1 KiB, the whole number
        of bytes.

    Examples:
        >>> from remat_guide.tables import human_bytes
        >>> human_bytes(1_124_073_472)
        '1.047 GiB'
        >>> human_bytes(12)
        '12 bytes'
        >>> human_bytes(3 * 2**20)
        '3.000 MiB'

    Raises:
        TypeError: If ``nbytes`` is not an integer.
    """
    if isinstance(nbytes, bool) or not isinstance(nbytes, numbers.Integral):
        raise TypeError(f"nbytes must be an int, got {type(nbytes).__name__}")
    name, size = unit_for([nbytes], "bytes")
    if size == 1:
        return f"{int(nbytes):,} byte{'' if nbytes == 1 else 's'}"
    return f"{_formatter('bytes', size)(nbytes)} {name}"


def _column_formatter(values: pd.Series, kind: str) -> tuple[str, Any]:
    """The unit and formatter of a column."""
    name, size = unit_for(values, kind) if kind in _UNITS else ("", 1)
    return name, _formatter(kind, size)


def _alike(values: pd.Series, formatter: Any) -> list[bool]:
    """For each value, whether a different value of the column prints the same."""
    seen: dict[str, set] = {}
    for value in values:
        if not pd.isna(value):
            seen.setdefault(formatter(value), set()).add(value)
    return [not pd.isna(value) and len(seen[formatter(value)]) > 1 for value in values]


def _tolerance(kind: str, colliding: Iterable[float]) -> str:
    """Within what values that print alike are equal: the width of one printed step."""
    if kind == "ratio" and all(abs(v) < 10 for v in colliding):
        return f"{10.0**-_RATIO_DECIMALS:.{_RATIO_DECIMALS}f}×"  # three decimals: 0.001 apart
    return "0.1%"  # four significant figures: one step is under 0.1% of the value


# The width of a phone's column, in characters of a table (0.85em at 16 px: about 7 px
# each), after each column's padding.
PHONE_CHARACTERS = 44
_PADDING_CHARACTERS = 2
_BREAK = re.compile(r"\s+|<wbr>|(?<=[_/])")


def _narrowest(cell: str, numeric: bool) -> int:
    """The fewest characters a cell's text needs across: its longest unbreakable piece."""
    if numeric:
        return len(cell)
    pieces = _BREAK.split(re.sub(r"<(?!wbr>)[^>]+>", "", cell))
    return max((len(html.unescape(piece)) for piece in pieces), default=0)


def phone_columns(cells: Mapping[str, list[str]], units: Mapping[str, str] | None = None,
                  *, width: int = PHONE_CHARACTERS) -> list[str]:
    """The columns a table shows on a phone: its labels, the ones that tell rows apart, the units.

    The labels always show: the first column, and the second too where the first repeats
    and the two together name the rows (``layout, policy``). Then come the columns that the rows need to read
    differently: while two rows read alike in the shown columns (the labels left out) and
    differ in another, the column that tells most such pairs apart joins. The columns left
    over join while the table still fits ``width`` characters. Both times the columns in
    units come first (the first of each kind, then the rest), then the others, each left
    to right. What the rows hold besides stays behind the table's "all columns" switch.

    Args:
        cells: Each column's header mapped to its cells as printed (HTML of a cell is
            allowed: tags are dropped, ``<wbr>`` counts as a break).
        units: For the numeric columns, their kind of :data:`COLUMN_UNITS`.
        width: The phone's column, in characters.

    Returns:
        The headers of the columns to show, in the table's order.

    Raises:
        ValueError: If ``cells`` has no column or its columns differ in length.

    Examples:
        >>> from remat_guide.tables import phone_columns
        >>> phone_columns({"policy": ["all", "none"], "inputs": ["kept", "kept"],
        ...                "matmul": ["kept", "kept"], "other intermediates": ["kept", "—"]},
        ...               width=20)
        ['policy', 'other intermediates']
        >>> phone_columns({"layout": ["dp", "dp"], "policy": ["a", "b"], "temp": ["1.0", "2.0"],
        ...                "FLOPs": ["3.0", "4.0"], "notes": ["x", "y"]},
        ...               {"temp": "bytes", "FLOPs": "flops"}, width=30)
        ['layout', 'policy', 'temp', 'FLOPs']
    """
    columns = list(cells)
    if not columns:
        raise ValueError("cells must have at least one column")
    lengths = {len(values) for values in cells.values()}
    if len(lengths) != 1:
        raise ValueError(f"cells' columns differ in length: {sorted(lengths)}")
    units = dict(units or {})
    count, labels = lengths.pop(), 1
    if (len(columns) > 1 and columns[1] not in units
            and len(set(cells[columns[0]])) < count <= len(set(zip(cells[columns[0]], cells[columns[1]])))):
        labels = 2  # the first two columns name the rows together
    data = columns[labels:]
    rows = list(zip(*(cells[c] for c in data))) if data else []
    seen: dict[str, int] = {}
    rank = {}
    for column in columns:
        kind = units.get(column)
        rank[column] = (kind is None, seen.get(kind, 0) if kind else 0, columns.index(column))
        if kind:
            seen[kind] = seen.get(kind, 0) + 1

    def need(column: str) -> int:
        numeric = column in units
        header = _narrowest(_breakable(column), numeric=False)
        return max([header, *(_narrowest(str(cell), numeric) for cell in cells[column])]) + _PADDING_CHARACTERS

    shown: list[str] = []
    while True:
        alike = [(a, b) for i, a in enumerate(rows) for b in rows[i + 1:]
                 if a != b and all(a[data.index(c)] == b[data.index(c)] for c in shown)]
        if not alike:
            break
        splits = {c: sum(a[data.index(c)] != b[data.index(c)] for a, b in alike)
                  for c in data if c not in shown}
        shown.append(max(sorted(splits, key=rank.__getitem__), key=splits.__getitem__))
    used = sum(need(c) for c in columns[:labels]) + sum(need(c) for c in shown)
    for column in sorted((c for c in data if c not in shown), key=rank.__getitem__):
        if used + need(column) <= width:
            shown.append(column)
            used += need(column)
    return [c for c in columns if c in columns[:labels] or c in shown]


def _text(value: Any, html_cell: bool) -> str:
    """A cell as plain text: HTML cells lose their tags; a missing value is empty."""
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return ""
    text = str(value)
    return html.unescape(re.sub(r"<[^>]+>", "", text)) if html_cell else text


# No break inside a binary unit (KiB, MiB, GiB, ...): a header such as "temp (MiB)" keeps its unit whole.
_WORD_BREAK = re.compile(r"(?<=_)(?=\w)|(?<=[a-z])(?=[A-Z])(?!(?<=[KMGTPE]i)B\b)|(?<=[.:/])(?=[A-Za-z])"
                         r"|(?<=:)(?=\d)|(?<=,)(?=[\d,]*\])")


def word_breaks(text: str) -> str:
    """HTML text with a line-break opportunity after each ``_``, inside camel case and more.

    A long name in a table cell then wraps between its words
    (``save_only_<wbr>these_<wbr>names``, ``Save<wbr>Only<wbr>These<wbr>Names``), a
    source location after its dot and colon (``model.<wbr>py:<wbr>12``), a shape after its
    commas (``f32[1,<wbr>4096]``), never between two letters of one word nor inside a
    unit (``MiB``), and the table fits a narrower column.

    Args:
        text: HTML text (already escaped).

    Returns:
        The text with ``<wbr>`` inserted.

    Examples:
        >>> word_breaks("save_only_these_names")
        'save_<wbr>only_<wbr>these_<wbr>names'
        >>> word_breaks("SaveOnlyTheseNames")
        'Save<wbr>Only<wbr>These<wbr>Names'
        >>> word_breaks("f32[1,4096] at model.py:12, 3.5")
        'f32[1,<wbr>4096] at model.<wbr>py:<wbr>12, 3.5'
        >>> word_breaks("device_bytes (MiB)")
        'device_<wbr>bytes (MiB)'
    """
    return _WORD_BREAK.sub("<wbr>", text)


def _breakable(value: Any) -> str:
    return word_breaks(html.escape(str(value)))


class Table:
    """A table to show: the values as a DataFrame, rendered as HTML in a notebook.

    Numeric columns are right-aligned; byte and FLOP columns are shown in one unit each,
    named in the header (``temp (MiB)``), while the ``frame`` attribute keeps the exact values.

    One rule for numbers: byte, FLOP and seconds columns show :data:`SIGNIFICANT` (four)
    significant figures, ratios the same but at most three decimals; counts, and bytes or
    FLOPs under 1 KiB or 1 kFLOP, are whole numbers. A value under a hundredth of its
    column's unit shows in its own unit, named in the cell (``68 B`` in a MiB column).
    No more digits are printed to tell two values apart: where different values of a column print alike, each is marked
    ``≈`` and a note under the table says within what they are equal (0.1% of the value,
    or 0.001× for ratios under 10).

    On a phone (the site's stylesheet, at most 600 px wide) the table shows the columns of
    :func:`phone_columns` (or ``key_columns``): the first column, the columns that tell its
    rows apart and as many more as fit; an "all columns" switch above it shows the rest.
    ``str()`` gives the whole table as plain text.

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
        key_columns: The columns a phone shows; by default those of :func:`phone_columns`.
            The columns that tell the rows apart should be among them.

    Raises:
        TypeError: If ``frame`` is not a DataFrame or ``cell_classes`` is given and is not one.
        ValueError: If ``units``, ``html_columns`` or ``key_columns`` names a column that
            ``frame`` lacks, ``units`` a kind not in :data:`COLUMN_UNITS`, or
            ``cell_classes`` is not shaped like ``frame``.

    Examples:
        >>> import pandas as pd
        >>> from remat_guide.tables import Table
        >>> table = Table(pd.DataFrame({"policy": ["a", "b"], "temp": [2**20, 3 * 2**20]}),
        ...               units={"temp": "bytes"})
        >>> print(table)
        policy  temp (MiB)
        ------  ----------
        a            1.000
        b            3.000
        >>> '<td class="data row1 col1 num" >3.000</td>' in table._repr_html_()
        True
        >>> print(Table(pd.DataFrame({"ratio": [1.332467529, 0.80740353, 12.3456]}),
        ...             units={"ratio": "ratio"}))
        ratio
        ------
        1.332×
        0.807×
        12.35×
        >>> print(Table(pd.DataFrame({"temp": [2**20, 2**20 + 2**6, 2 * 2**20]}),
        ...             units={"temp": "bytes"}))
        temp (MiB)
        ----------
            ≈1.000
            ≈1.000
             2.000
        ≈ temp (MiB): values that print alike are equal within 0.1%, not exactly
        >>> print(Table(pd.DataFrame({"temp": [50 * 2**20, 68, 3 * 2**10]}),
        ...             units={"temp": "bytes"}))
        temp (MiB)
        ----------
             50.00
              68 B
         3.000 KiB
    """

    def __init__(self, frame: pd.DataFrame, *, units: Mapping[str, str] | None = None,
                 cell_classes: pd.DataFrame | None = None, caption: str | None = None,
                 legend: Mapping[str, str] | None = None, html_columns: Iterable[str] = (),
                 table_class: str = "", key_columns: Iterable[str] | None = None) -> None:
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
        self.key_columns = None if key_columns is None else tuple(key_columns)
        for column in self.key_columns or ():
            if column not in frame.columns:
                raise ValueError(f"key_columns names {column!r}, which frame lacks; it has {list(frame.columns)}")

    def _shown(self) -> tuple[pd.DataFrame, dict[str, Any], dict[str, list[bool]], list[str]]:
        """The frame with its headers in units, the formatters, the cells marked ≈, and the note's lines."""
        headers, formatters, alike, notes = {}, {}, {}, []
        for column, kind in self.units.items():
            name, formatter = _column_formatter(self.frame[column].dropna(), kind)
            headers[column] = header = f"{column} ({name})" if name else column
            formatters[header] = formatter
            alike[header] = _alike(self.frame[column], formatter)
            if any(alike[header]):
                colliding = [v for v, a in zip(self.frame[column], alike[header]) if a]
                notes.append(f"≈ {header}: values that print alike are equal within {_tolerance(kind, colliding)}, "
                             "not exactly")
        return self.frame.rename(columns=headers), formatters, alike, notes

    def _html_headers(self, shown: pd.DataFrame) -> list[str]:
        """The headers, as ``shown`` names them, of the columns whose cells are HTML."""
        return [header for column, header in zip(self.frame.columns, shown.columns)
                if column in self.html_columns]

    def _phone(self, shown: pd.DataFrame, formatters: Mapping[str, Any]) -> list[int]:
        """The positions of the columns a phone shows."""
        if self.key_columns is not None:
            return [i for i, column in enumerate(self.frame.columns) if column in self.key_columns]
        raw = self._html_headers(shown)
        cells = {str(header): [formatters[header](v) if header in formatters
                               else str(v) if header in raw else _breakable(v) for v in shown[header]]
                 for header in shown.columns}
        units = {str(header): kind for header, kind in zip(shown.columns, self.frame.columns.map(self.units.get))
                 if kind}
        keep = phone_columns(cells, units)
        return [i for i, header in enumerate(shown.columns) if str(header) in keep]

    def _repr_html_(self) -> str:
        shown, formatters, alike, notes = self._shown()
        classes = pd.DataFrame("", index=shown.index, columns=shown.columns)
        if self.cell_classes is not None:
            classes = pd.DataFrame(self.cell_classes.to_numpy(), index=shown.index, columns=shown.columns)
        numeric = [i for i, column in enumerate(shown.columns) if column in formatters]
        phone = self._phone(shown, formatters) if len(shown.columns) else []
        extra = [i for i in range(len(shown.columns)) if i not in phone]
        # Marks come first, "num" last, so that a cell's own classes keep their place.
        for i in range(len(shown.columns)):
            marks = pd.Series("remat-extra " if i in extra else "", index=shown.index)
            if i in numeric:
                marks = marks + pd.Series(alike[shown.columns[i]], index=shown.index).map(
                    {True: _APPROX_CLASS + " ", False: ""})
            own = marks + classes.iloc[:, i] + (" num" if i in numeric else "")
            classes.iloc[:, i] = own.str.split().str.join(" ")
        # The id is a hash of the content, so that it is the same on every build.
        digest = hashlib.sha1(shown.to_csv().encode() + (self.caption or "").encode()).hexdigest()[:10]
        raw = self._html_headers(shown)
        escaped = [c for c in shown.columns if c not in formatters and c not in raw]
        styler = shown.style.hide(axis="index")
        if formatters:
            styler = styler.format(formatters, subset=list(formatters))
        if escaped:
            styler = styler.format(_breakable, subset=escaped)
        styler = styler.format_index(_breakable, axis=1)  # long headers wrap between words too
        table_class = f"remat-table {self.table_class}".strip()
        styler = (styler.set_td_classes(classes).set_uuid(digest)
                  .set_table_attributes(f'class="{table_class}"')
                  .set_table_styles([{"selector": f"th.col{i}", "props": "text-align: right;"}
                                     for i in numeric]))
        styler.cell_ids = False
        table = styler.to_html()
        for i in extra:  # the header of a column a phone leaves out
            heading = f'class="col_heading level0 col{i}'
            table = table.replace(f'{heading}"', f'{heading} remat-extra"')
        key = "".join(f'<span class="{html.escape(css)}">{html.escape(text)}</span>'
                      for css, text in self.legend.items())
        key = f'<p class="remat-legend">{key}</p>' if key else ""
        # The caption sits above the scrolling box, so that a phone shows all of it.
        caption = (f'<p class="remat-table-caption">{html.escape(self.caption)}</p>'
                   if self.caption else "")
        switch = (f'<label class="remat-all-columns"><input type="checkbox"> all {len(shown.columns)} columns'
                  f' ({len(extra)} more)</label>' if extra else "")
        note = "".join(f'<p class="remat-table-note">{html.escape(line)}</p>' for line in notes)
        return (f'<div class="remat-table-block">{caption}{key}{switch}'
                f'<div class="remat-table-scroll">{table}</div>{note}</div>')

    def __str__(self) -> str:
        shown, formatters, alike, notes = self._shown()
        raw = self._html_headers(shown)
        columns = [str(column) for column in shown.columns]
        cells = [[("≈" if marked else "") + formatters[column](value)
                  for value, marked in zip(shown[column], alike[column])] if column in formatters
                 else [_text(value, html_cell=column in raw) for value in shown[column]]
                 for column in shown.columns]
        widths = [max([len(header), *map(len, column)]) for header, column in zip(columns, cells)]
        numeric = [column in formatters for column in shown.columns]

        def line(values: Iterable[str]) -> str:
            return "  ".join(value.rjust(width) if right else value.ljust(width)
                             for value, width, right in zip(values, widths, numeric)).rstrip()

        lines = [line(columns), "  ".join("-" * width for width in widths),
                 *(line(row) for row in zip(*cells)), *notes]
        if self.legend:
            lines.insert(0, "key: " + ", ".join(self.legend.values()))
        if self.caption:
            lines.insert(0, self.caption)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)
