"""The "What changed across versions" page: the probe run under each JAX, and its tables side by side."""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import html
import json
import os
import pathlib
import re
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import pandas as pd

from remat_guide.site import version_probe
from remat_guide.site.api_items import api_spellings
from remat_guide.tables import Table, word_breaks

__all__ = ["ABSENT", "ENVS_VARIABLE", "PROBE_PLATFORM", "REMAT3_ITEMS", "ComparisonTable", "VersionReport",
           "api_label", "changed_rows", "comparison_table", "count_in_words", "error_parts", "find_interpreters",
           "join_versions", "residual_summary", "run_probes", "short_value", "third_party_imports",
           "version_key"]

#: What a table shows for an item that one version does not have.
ABSENT = "(absent)"

#: The environment variable that names the folder of the older JAX releases' environments
#: (the Makefile sets it and makes one environment ``<version>/`` per release).
ENVS_VARIABLE = "REMAT_GUIDE_JAX_ENVS"

#: The JAX backend every probe runs on (``JAX_PLATFORMS``).
PROBE_PLATFORM = "cpu"

#: The rows of the ``jax_remat3`` table, in the page's order (the probe's ``remat3`` item
#: also holds ``residuals``, which has a table of its own).
REMAT3_ITEMS = ("exists", "primitive (flag off)", "primitive (flag on)",
                "primitive (decorated off, called on)", "static_argnames='flag' (Python if on it)")

_VERSION = re.compile(r"\d+(?:\.\d+)*")
_RAISES = re.compile(r"raises ([A-Za-z_][\w.]*)(?:: (.*))?", re.DOTALL)
_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
          "eleven", "twelve")
_REMAKE = "run `make html` (or `make jax-envs`) to create the environments"

Row = tuple[str, list[Any]]


# --- the interpreters and their documents ----------------------------------------------------

def version_key(version: str) -> tuple[int, ...]:
    """A key that sorts release numbers as numbers, not as text.

    Args:
        version: A release number of digits and dots, such as ``"0.10.2"``.

    Returns:
        The numbers of ``version`` as a tuple.

    Raises:
        ValueError: If ``version`` is not digits separated by dots.

    Examples:
        >>> from remat_guide.site.versions import version_key
        >>> sorted(["0.11.2", "0.9.0", "0.10.2", "0.12.0.1"], key=version_key)
        ['0.9.0', '0.10.2', '0.11.2', '0.12.0.1']
    """
    if not isinstance(version, str) or not _VERSION.fullmatch(version):
        raise ValueError(f"a version is digits separated by dots, got {version!r}")
    return tuple(int(part) for part in version.split("."))


def find_interpreters(envs: str | os.PathLike[str] | None = None) -> dict[str, pathlib.Path]:
    """The interpreter of each JAX release the page compares, by release, oldest first.

    The older releases are the sub-folders of ``envs`` named for a version (``0.10.2/``),
    each an environment with ``bin/python``; the Makefile makes one per file
    ``requirements-jax-<version>.txt``. The running interpreter is added for the JAX it runs.
    Other entries of ``envs`` (the Makefile's stamp file, hidden folders) are ignored.

    Args:
        envs: The folder of the environments; ``None`` reads the environment variable
            :data:`ENVS_VARIABLE`.

    Returns:
        ``{version: path of its python}``, sorted by :func:`version_key`.

    Raises:
        RuntimeError: If the variable is unset or empty, the folder does not exist or holds
            no environment, a version's folder has no ``bin/python``, or a folder is named for
            the running JAX. Each message says to run ``make html``.

    Examples:
        >>> import pathlib, sys, tempfile, jax
        >>> from remat_guide.site.versions import find_interpreters
        >>> with tempfile.TemporaryDirectory() as envs:
        ...     for version in ("0.11.2", "0.9.0"):
        ...         python = pathlib.Path(envs, version, "bin", "python")
        ...         python.parent.mkdir(parents=True)
        ...         python.touch()
        ...     found = find_interpreters(envs)
        >>> list(found) == ["0.9.0", "0.11.2", jax.__version__]
        True
        >>> found[jax.__version__] == pathlib.Path(sys.executable)
        True
        >>> find_interpreters("")
        Traceback (most recent call last):
        ...
        RuntimeError: REMAT_GUIDE_JAX_ENVS is not set. Build this page with `make html`: ...
    """
    if envs is None:
        envs = os.environ.get(ENVS_VARIABLE, "")
    if not os.fspath(envs):
        raise RuntimeError(f"{ENVS_VARIABLE} is not set. Build this page with `make html`: it creates "
                           "the environments of the older JAX releases (one per file "
                           "requirements-jax-<version>.txt) and sets the variable.")
    folder = pathlib.Path(envs)
    if not folder.is_dir():
        raise RuntimeError(f"${ENVS_VARIABLE} names {folder}, which is not a folder: {_REMAKE}.")
    found = {}
    for sub in sorted(folder.iterdir()):
        if not sub.is_dir() or not _VERSION.fullmatch(sub.name):
            continue
        python = sub / "bin" / "python"
        if not python.is_file():
            raise RuntimeError(f"No interpreter for JAX {sub.name} under ${ENVS_VARIABLE} "
                               f"({python} is missing): {_REMAKE}.")
        found[sub.name] = python
    if not found:
        raise RuntimeError(f"No environment of an older JAX release under ${ENVS_VARIABLE} ({folder}): "
                           f"{_REMAKE}.")
    if jax.__version__ in found:
        raise RuntimeError(f"${ENVS_VARIABLE} holds an environment for JAX {jax.__version__}, the "
                           "release of the running interpreter: remove it, or remove the file "
                           f"requirements-jax-{jax.__version__}.txt and {_REMAKE} again.")
    found[jax.__version__] = pathlib.Path(sys.executable)
    return {version: found[version] for version in sorted(found, key=version_key)}


def run_probes(interpreters: Mapping[str, str | os.PathLike[str]]) -> dict[str, dict[str, Any]]:
    """Runs the probe script under each interpreter and returns the documents it prints.

    Every run gets the same clean environment: the CPU backend (:data:`PROBE_PLATFORM`),
    and no ``JAX_*`` variable that could change a flag's default.

    Args:
        interpreters: ``{version: path of its python}``, as :func:`find_interpreters` returns.

    Returns:
        ``{version: document}`` in the order of ``interpreters``; each document is the
        JSON of :func:`remat_guide.site.version_probe.probe`, parsed.

    Raises:
        RuntimeError: If the probe fails under an interpreter, or reports another JAX than
            the version it is listed for, or another backend than :data:`PROBE_PLATFORM`.

    Examples:
        >>> import pathlib, sys, jax
        >>> from remat_guide.site.versions import run_probes
        >>> documents = run_probes({jax.__version__: pathlib.Path(sys.executable)})
        >>> documents[jax.__version__]["backend"]
        'cpu'
        >>> run_probes({"0.1": pathlib.Path(sys.executable)})
        Traceback (most recent call last):
        ...
        RuntimeError: The interpreter listed for JAX 0.1 (...) runs JAX ...
    """
    env = {name: value for name, value in os.environ.items() if not name.startswith("JAX_")}
    env["JAX_PLATFORMS"] = PROBE_PLATFORM
    documents = {}
    for version, python in interpreters.items():
        run = subprocess.run([os.fspath(python), version_probe.__file__], capture_output=True,
                             text=True, env=env, check=False)
        if run.returncode != 0:
            last = (run.stderr.strip().splitlines() or ["(no message)"])[-1]
            raise RuntimeError(f"The probe failed under JAX {version} ({python}), exit status "
                               f"{run.returncode}: {last}. If the environment is broken, {_REMAKE} again.")
        document = json.loads(run.stdout)
        if document.get("jax") != version:
            raise RuntimeError(f"The interpreter listed for JAX {version} ({python}) runs JAX "
                               f"{document.get('jax')}: each environment's folder must be named for "
                               f"its JAX release; {_REMAKE} again.")
        if document.get("backend") != PROBE_PLATFORM:
            raise RuntimeError(f"The probe under JAX {version} ran on {document.get('backend')!r}, "
                               f"not {PROBE_PLATFORM!r}")
        documents[version] = document
    return documents


def third_party_imports(path: str | os.PathLike[str]) -> list[str]:
    """The top-level modules a Python file imports, anywhere in it, that are not the standard library.

    The probe runs in environments that hold JAX alone, so this is ``['jax']`` for it.

    Args:
        path: The file to read.

    Returns:
        The names, sorted.

    Examples:
        >>> from remat_guide.site import version_probe
        >>> from remat_guide.site.versions import third_party_imports
        >>> third_party_imports(version_probe.__file__)
        ['jax']
    """
    tree = ast.parse(pathlib.Path(path).read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return sorted(names - set(sys.stdlib_module_names) - {"__future__"})


# --- words for the prose ---------------------------------------------------------------------

def join_versions(versions: Sequence[str]) -> str:
    """The versions as a sentence lists them: ``a, b and c``.

    Args:
        versions: The versions, in the order to name them.

    Returns:
        The versions joined with commas, the last two with "and".

    Raises:
        ValueError: If ``versions`` is empty.

    Examples:
        >>> from remat_guide.site.versions import join_versions
        >>> join_versions(["0.10.2", "0.11.2", "0.12.0.1"])
        '0.10.2, 0.11.2 and 0.12.0.1'
        >>> join_versions(["0.12.0.1"])
        '0.12.0.1'
    """
    versions = [str(v) for v in versions]
    if not versions:
        raise ValueError("no versions to list")
    return versions[0] if len(versions) == 1 else f"{', '.join(versions[:-1])} and {versions[-1]}"


def count_in_words(n: int) -> str:
    """A small count as a word (``3`` is ``"three"``), a larger one in digits.

    Args:
        n: The count.

    Returns:
        The word for ``n`` up to twelve, else its digits.

    Raises:
        ValueError: If ``n`` is not an int of at least 0.

    Examples:
        >>> from remat_guide.site.versions import count_in_words
        >>> count_in_words(3), count_in_words(13)
        ('three', '13')
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"n must be a count (an int >= 0), got {n!r}")
    return _WORDS[n] if n < len(_WORDS) else str(n)


# --- rows and tables -------------------------------------------------------------------------

def residual_summary(lines: Any) -> str:
    """A short form of the residual listing: arguments, then 'names', then primitive[shape].

    Args:
        lines: The lines of :func:`remat_guide.site.version_probe.residual_lines`, or a probe
            item's ``{"error": ...}``.

    Returns:
        One line of text; the error message for an error item.

    Raises:
        TypeError: If ``lines`` is neither a list of str nor an error dict.

    Examples:
        >>> from remat_guide.site.versions import residual_summary
        >>> residual_summary(["f32[2,3] from the argument x", "f32[2,3] named 'a'",
        ...                   "f32<host>[2,5] output of device_put", "f32[2,5] output of tanh"])
        "x · 'a' · host:device_put[2,5] tanh[2,5]"
        >>> residual_summary({"error": "TypeError: no"})
        'raises TypeError: no'
    """
    if isinstance(lines, dict) and "error" in lines:
        return f"raises {lines['error']}"
    if not isinstance(lines, list) or not all(isinstance(line, str) for line in lines):
        raise TypeError(f"lines must be a list of str or an error dict, got {lines!r}")
    groups: dict[str, list[str]] = {"argument": [], "named": [], "output": []}
    for line in lines:
        type_str, _, rest = line.partition(" ")
        shape = type_str[type_str.index("["):] if "[" in type_str else ""
        host = "host:" if "<host>" in type_str else ""
        if rest.startswith("from the argument "):
            groups["argument"].append(rest.removeprefix("from the argument "))
        elif rest.startswith("named "):
            groups["named"].append(host + rest.removeprefix("named "))
        elif rest.startswith("output of "):
            groups["output"].append(f"{host}{rest.removeprefix('output of ')}{shape}")
        else:
            groups["output"].append(line)
    return " · ".join(" ".join(g) for g in groups.values() if g) or "(nothing)"


def _values_differ(values: Sequence[Any]) -> bool:
    """Whether the JSON values of one row are not all equal."""
    return len({json.dumps(v, sort_keys=True) for v in values}) > 1


def changed_rows(rows: Sequence[Row]) -> list[str]:
    """The labels of the rows whose values are not all equal.

    Args:
        rows: ``(label, values)`` pairs, as for :func:`comparison_table`.

    Returns:
        The labels of the changed rows, in order.

    Examples:
        >>> from remat_guide.site.versions import changed_rows
        >>> changed_rows([("a", ["x", "x"]), ("b", ["x", "y"])])
        ['b']
    """
    return [label for label, values in rows if _values_differ(values)]


def error_parts(value: Any) -> tuple[str, str] | None:
    """The exception type and message of a value that records a raised exception.

    The probe writes a call that raised as ``raises TypeName: message`` (and
    :class:`VersionReport` gives a failed probe item the same form).

    Args:
        value: A table value.

    Returns:
        ``(type name, message)`` (the message may be empty), or ``None`` when ``value``
        records no exception.

    Examples:
        >>> from remat_guide.site.versions import error_parts
        >>> error_parts("raises TypeError: f() got an unexpected keyword argument 'x'")
        ('TypeError', "f() got an unexpected keyword argument 'x'")
        >>> error_parts("raises jax.errors.TracerBoolConversionError"), error_parts("ok")
        (('jax.errors.TracerBoolConversionError', ''), None)
    """
    if not isinstance(value, str):
        return None
    match = _RAISES.fullmatch(value)
    return (match[1], match[2] or "") if match else None


def short_value(value: Any) -> str:
    """A value as a short text: the exception type for a recorded exception, lists joined.

    Examples:
        >>> from remat_guide.site.versions import short_value
        >>> short_value("raises TypeError: no"), short_value(["remat2"]), short_value(False)
        ('TypeError', 'remat2', 'False')
    """
    error = error_parts(value)
    if error is not None:
        return error[0]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return ", ".join(value)
    if isinstance(value, bool | int | float):
        return repr(value)
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


class ComparisonTable:
    """A version table and, under it, the numbered notes that hold its exceptions' messages.

    A cell whose value records an exception (``raises TypeName: message``) shows only the
    exception's type and a note number; the note under the table gives the whole message.
    Equal messages share one note; an exception recorded without a message
    (``raises TypeName``) gets its type alone. In HTML, the number links to its note.

    Attributes:
        table: The :class:`~remat_guide.tables.Table` of the cells.
        notes: The notes' texts (``TypeName: message``), note 1 first.
        changed: The labels of the rows whose values are not all equal.
    """

    def __init__(self, table: Table, notes: list[str], anchor: str, changed: list[str]) -> None:
        self.table = table
        self.notes = notes
        self.changed = changed
        self._anchor = anchor

    def _repr_html_(self) -> str:
        if not self.notes:
            return self.table._repr_html_()
        items = "".join(f'<li id="{self._anchor}-{n}">{_note_html(note)}</li>'
                        for n, note in enumerate(self.notes, start=1))
        return (f"{self.table._repr_html_()}"
                f'<ol class="remat-notes" style="font-size: 0.85em; overflow-wrap: break-word;">'
                f"{items}</ol>")

    def __str__(self) -> str:
        notes = [f"[{n}] {note}" for n, note in enumerate(self.notes, start=1)]
        return "\n".join([str(self.table), *notes])

    def __repr__(self) -> str:
        return str(self)


def _note_html(note: str) -> str:
    """A note as HTML: the exception type in ``<code>``, then the message."""
    kind, sep, message = note.partition(": ")
    return f"<code>{html.escape(kind)}</code>{html.escape(sep + message)}"


def comparison_table(first_header: str, versions: list[str], rows: Sequence[Row],
                     code: bool = True) -> ComparisonTable:
    """A table: one row per item, a "changed" column, then one column per version.

    A row whose values are not all equal is marked: its label in bold and ``yes`` in the
    column "changed" (the column is left out when no row changed). A value is shown as
    text, in ``<code>`` when ``code`` is true (except :data:`ABSENT`); a value that
    records an exception shows only the exception's type and the number of the note,
    under the table, that gives the whole message (no note when it has no message).

    Args:
        first_header: The header of the label column.
        versions: The column headers, one per version.
        rows: ``(label, values)`` pairs, one value per version.
        code: Whether to set the values in ``<code>``.

    Returns:
        A ``ComparisonTable`` (HTML in a notebook; its ``notes`` hold the messages) whose
        table has the CSS class ``remat-versions``; changed rows' label and mark carry the
        class ``remat-changed``.

    Raises:
        ValueError: If ``versions`` is empty or a row has a value count other than
            ``len(versions)``.

    Examples:
        >>> from remat_guide.site.versions import comparison_table
        >>> table = comparison_table("item", ["1", "2"], [
        ...     ("a", ["x", "x"]), ("b", ["x", "raises TypeError: b() takes no arguments"])])
        >>> print(table)
        item  changed  1  2
        ----  -------  -  -------------
        a              x  x
        b     yes      x  TypeError [1]
        [1] TypeError: b() takes no arguments
        >>> '<td class="data row1 col0 remat-changed" >b</td>' in table._repr_html_()
        True
    """
    if not isinstance(versions, list) or not versions:
        raise ValueError("versions must be a non-empty list")
    for label, values in rows:
        if len(values) != len(versions):
            raise ValueError(f"row {label!r} has {len(values)} values for {len(versions)} versions")
    digest = hashlib.sha1(json.dumps([first_header, versions, [list(r) for r in rows]],
                                     sort_keys=True, default=str).encode()).hexdigest()[:8]
    anchor = f"versions-note-{digest}"
    notes: list[str] = []

    def cell(value: Any) -> str:
        error = error_parts(value)
        if error is not None:
            kind = word_breaks(html.escape(error[0]))
            kind = f"<code>{kind}</code>" if code else kind
            if not error[1]:  # the type is all there is to tell
                return kind
            note = f"{error[0]}: {error[1]}"
            if note not in notes:
                notes.append(note)
            n = notes.index(note) + 1
            return f'{kind} <a href="#{anchor}-{n}">[{n}]</a>'
        text = word_breaks(html.escape(short_value(value)))
        return f"<code>{text}</code>" if code and value != ABSENT else text

    changed = changed_rows(rows)
    mark = ["changed"] if changed else []
    columns = [first_header, *mark, *versions]
    frame = pd.DataFrame([[label, *(["yes" if label in changed else ""] if mark else []),
                           *map(cell, values)] for label, values in rows], columns=columns)
    classes = pd.DataFrame([["remat-changed" if label in changed else ""] * (1 + len(mark))
                            + [""] * len(versions) for label, _ in rows], columns=columns)
    # On a phone: what is compared, whether it changed, and the newest release's value.
    table = Table(frame, cell_classes=classes, html_columns=versions, table_class="remat-versions",
                  key_columns=[first_header, *mark, versions[-1]])
    return ComparisonTable(table, notes, anchor, changed)


# --- the summary of what changed -------------------------------------------------------------

_HEAD = re.compile(r"([A-Za-z_][\w.]*)(\(.*\)|=(.*))?", re.DOTALL)


def api_label(text: str) -> str | None:
    """The reference label on this site of the API that an inline literal names, if any.

    A literal names an API when its text is the API's name (a policy, a parameter, an
    export of ``jax.ad_checkpoint``, a flag, ``jax.checkpoint`` or ``jax.remat``),
    optionally followed by a call ``(...)`` or an assignment ``=...``; when the name before
    ``=`` is none of these, the value after it is read the same way. It is the rule by
    which the site's link check finds the names that must link.

    Examples:
        >>> from remat_guide.site.versions import api_label
        >>> api_label("concrete=True"), api_label("jax.remat(prevent_cse=True)"), api_label("ok")
        ('param-concrete-removed', 'reference-remat', None)
    """
    spellings = api_spellings()
    text = " ".join(text.split())
    while (match := _HEAD.fullmatch(text)) is not None:
        if match[1] in spellings:
            return spellings[match[1]]
        if match[3] is None:
            return None
        text = match[3].strip()
    return None


def _code(text: str) -> str:
    """``text`` as a Markdown inline literal, linked to its reference when it names an API."""
    label = api_label(text)
    return f"[`{text}`]({label})" if label else f"`{text}`"


def _and(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _field_change(before: Any, after: Any) -> str:
    """``before → after`` in short form; of two parameter descriptions, only the fields that differ."""
    old, new = short_value(before), short_value(after)
    old_fields, new_fields = old.split("; "), new.split("; ")
    if len(old_fields) == len(new_fields) == 3:
        pairs = [(o, n) for o, n in zip(old_fields, new_fields) if o != n]
        old, new = "; ".join(o for o, _ in pairs), "; ".join(n for _, n in pairs)
    return f"`{old}` → `{new}`"


@dataclasses.dataclass
class Step:
    """What differs from one release to the next, as Markdown phrases that link API names.

    Attributes:
        before: The older release.
        after: The next release.
        new: The things that ``after`` has and ``before`` lacks.
        gone: The things that ``before`` has and ``after`` lacks.
        changed: The things both have that differ, each with its two values where they are short.
    """

    before: str
    after: str
    new: list[str] = dataclasses.field(default_factory=list)
    gone: list[str] = dataclasses.field(default_factory=list)
    changed: list[str] = dataclasses.field(default_factory=list)

    def markdown(self) -> str:
        """The step as a Markdown list item, with a sub-item per kind of difference."""
        lines = [f"- **{self.before} → {self.after}**" + ("" if self.new or self.gone or self.changed
                                                         else ": no difference")]
        for word, items in (("New", self.new), ("Gone", self.gone), ("Changed", self.changed)):
            if items:
                lines.append(f"  - {word}: {'; '.join(items)}.")
        return "\n".join(lines)


def _kind(value: str) -> str:
    """A kind of object as the summary names it: any ``instance of X`` is an instance of a class."""
    return "an instance of a class" if value.startswith("instance of ") else f"`{value}`"


def _transitions(pairs: Sequence[tuple[str, Any, Any]]) -> dict[tuple[str, str], list[str]]:
    """The labels of the changed pairs, grouped by their ``(before, after)`` in short form."""
    groups: dict[tuple[str, str], list[str]] = {}
    for label, before, after in pairs:
        if before is not ABSENT and after is not ABSENT and _values_differ([before, after]):
            groups.setdefault((short_value(before), short_value(after)), []).append(label)
    return groups


def _is_error(node: Any) -> bool:
    """Whether ``node`` is a failed probe item, ``{"error": "TypeName: message"}``."""
    return isinstance(node, Mapping) and set(node) == {"error"}


def _lookup(document: Mapping[str, Any], path: Sequence[str]) -> Any:
    """The item at ``path``; :data:`ABSENT` if a key is missing; the first error item met on the way."""
    node: Any = document
    for key in path:
        if _is_error(node):
            return node
        if not isinstance(node, Mapping) or key not in node:
            return ABSENT
        node = node[key]
    return node


def _describe(parameters: list[Mapping[str, str]], name: str) -> str:
    """One parameter of a probed signature as ``kind; default d; annotation``, or :data:`ABSENT`."""
    for param in parameters:
        if param["name"] == name:
            kind = param["kind"].replace("_", " ").lower()
            return f"{kind}; default {param['default']}; {param['annotation']}"
    return ABSENT


class VersionReport:
    """The probe's documents of several JAX releases, as the rows of the page's tables.

    Each table is a list of ``(label, values)`` rows with one value per version, in the
    order of ``documents``. A value is the probe's result; :data:`ABSENT` where the
    version has no such item; ``raises TypeName: message`` where the version's probe
    item failed (the form the probe gives a call that raised).
    Labels are the union over the versions, in the order they first appear.

    Args:
        documents: ``{version: document}``, as :func:`run_probes` returns (oldest first).

    Attributes:
        documents: The documents, by version.
        versions: The versions, in order.

    Raises:
        ValueError: If ``documents`` is empty.
        TypeError: If ``documents`` or one of its documents is not a mapping.

    Examples:
        >>> from remat_guide.site.versions import VersionReport
        >>> report = VersionReport({
        ...     "0.1": {"behaviour": {"concrete=True": "ok"}, "top_level_names": ["remat"]},
        ...     "0.2": {"behaviour": {"concrete=True": "raises TypeError: no"},
        ...             "top_level_names": ["checkpoint", "remat"]}})
        >>> report.behaviour_rows()
        [('concrete=True', ['ok', 'raises TypeError: no'])]
        >>> report.versions_where(report.behaviour_rows(), "concrete=True", lambda v: v == "ok")
        ['0.1']
        >>> report.counts("top_level_names")
        {'0.1': 1, '0.2': 2}
        >>> print(report.table("call", report.behaviour_rows(), code=False))
        call           changed  0.1  0.2
        -------------  -------  ---  -------------
        concrete=True  yes      ok   TypeError [1]
        [1] TypeError: no
    """

    def __init__(self, documents: Mapping[str, Mapping[str, Any]]) -> None:
        if not isinstance(documents, Mapping):
            raise TypeError(f"documents must be a mapping of version to document, got "
                            f"{type(documents).__name__}")
        if not documents:
            raise ValueError("documents must hold at least one version")
        for version, document in documents.items():
            if not isinstance(document, Mapping):
                raise TypeError(f"the document of {version!r} must be a mapping, got {type(document).__name__}")
        self.documents: dict[str, Mapping[str, Any]] = dict(documents)
        self.versions: list[str] = list(documents)

    # -- reading the documents --

    def environments(self) -> str:
        """One line per version: JAX, jaxlib, Python and the backend the probe ran on.

        Examples:
            >>> from remat_guide.site.versions import VersionReport
            >>> print(VersionReport({"0.1": {"jax": "0.1", "jaxlib": "0.1", "python": "3.13",
            ...                              "backend": "cpu"}}).environments())
            JAX 0.1, jaxlib 0.1, Python 3.13, backend: cpu
        """
        return "\n".join(f"JAX {doc['jax']}, jaxlib {doc['jaxlib']}, Python {doc['python']}, "
                         f"backend: {doc['backend']}" for doc in self.documents.values())

    def item(self, *path: str) -> dict[str, Any]:
        """The probe item at ``path`` (keys into the document), by version.

        A version without the item gets :data:`ABSENT`; one whose probe item failed gets
        its ``{"error": ...}`` dict.

        Examples:
            >>> from remat_guide.site.versions import VersionReport
            >>> report = VersionReport({"0.1": {"policies": {"names": ["a"]}},
            ...                         "0.2": {"policies": {"error": "TypeError: no"}}})
            >>> report.item("policies", "names")
            {'0.1': ['a'], '0.2': {'error': 'TypeError: no'}}
        """
        return {version: _lookup(doc, path) for version, doc in self.documents.items()}

    def values(self, *path: str, then: Callable[[Any], Any] | None = None) -> list[Any]:
        """One table value per version: the item at ``path``, passed through ``then``.

        Args:
            *path: Keys into the document.
            then: A function of the item that gives the value to show (not applied to
                :data:`ABSENT` or to an error).

        Returns:
            The values in the order of ``versions``: :data:`ABSENT` where the item does
            not exist, ``raises TypeName: message`` where the probe item failed.

        Examples:
            >>> from remat_guide.site.versions import VersionReport
            >>> report = VersionReport({"0.1": {"policies": {"names": ["a", "b"]}},
            ...                         "0.2": {"policies": {"error": "TypeError: no"}},
            ...                         "0.3": {}})
            >>> report.values("policies", "names", then=len)
            [2, 'raises TypeError: no', '(absent)']
        """
        out = []
        for node in self.item(*path).values():
            if node is ABSENT:
                out.append(ABSENT)
            elif _is_error(node):
                out.append(f"raises {node['error']}")
            else:
                out.append(then(node) if then is not None else node)
        return out

    def counts(self, *path: str) -> dict[str, int]:
        """The number of entries of the item at ``path``, by version (the counts the prose quotes).

        Raises:
            LookupError: If a version lacks the item or its probe item failed.

        Examples:
            >>> from remat_guide.site.versions import VersionReport
            >>> VersionReport({"0.1": {"policies": {"names": ["a", "b"]}}}).counts("policies", "names")
            {'0.1': 2}
        """
        counts = {}
        for version, node in self.item(*path).items():
            if node is ABSENT or _is_error(node):
                raise LookupError(f"JAX {version} has no {'/'.join(path)} to count: {node!r}")
            counts[version] = len(node)
        return counts

    def _labels(self, *path: str) -> list[str]:
        """The keys (or entries) of the item at ``path``, the union over the versions, in order."""
        labels: list[str] = []
        for node in self.item(*path).values():
            if node is not ABSENT and not _is_error(node):
                labels += [label for label in node if label not in labels]
        return labels

    # -- the rows of each table --

    def parameter_rows(self, key: str) -> list[Row]:
        """One row per parameter of a probed signature: ``kind; default d; annotation``.

        Args:
            key: ``"checkpoint_parameters"`` or ``"remat_parameters"``.

        Examples:
            >>> from remat_guide.site.versions import VersionReport
            >>> p = {"name": "policy", "kind": "KEYWORD_ONLY", "default": "None", "annotation": "-"}
            >>> VersionReport({"0.1": {"remat_parameters": [p]}, "0.2": {"remat_parameters": []}}
            ...               ).parameter_rows("remat_parameters")
            [('policy', ['keyword only; default None; -', '(absent)'])]
        """
        names: list[str] = []
        for node in self.item(key).values():
            if isinstance(node, list):
                names += [param["name"] for param in node if param["name"] not in names]
        return [(name, self.values(key, then=lambda params, name=name: _describe(params, name)))
                for name in names]

    def behaviour_rows(self) -> list[Row]:
        """One row per call of the probe's ``behaviour`` item: ``ok``, ``accepted``, ``honoured`` or ``raises ...``."""
        return [(call, self.values("behaviour", call)) for call in self._labels("behaviour")]

    def remat_rows(self) -> list[Row]:
        """Whether ``jax.remat`` is ``jax.checkpoint``, then the parameters of ``jax.remat``."""
        return [("jax.remat is jax.checkpoint", self.values("remat_is_checkpoint")),
                *self.parameter_rows("remat_parameters")]

    def policy_rows(self) -> list[Row]:
        """The namespace ``jax.checkpoint_policies``: its type, whether ``import`` loads it, its
        number of names and its aliases, the kind of each name, then the kind of what each
        policy factory returns for the probe's fixed arguments."""
        rows = [
            ("type of jax.checkpoint_policies", self.values("policies", "namespace_type")),
            ("import jax.checkpoint_policies", self.values("policies", "import_as_module")),
            ("number of names", self.values("policies", "names", then=len)),
            ("aliases (the same object)", self.values(
                "policies", "aliases", then=lambda pairs: ", ".join(" is ".join(pair) for pair in pairs))),
        ]
        rows += [(name, self.values("policies", "kinds", name))
                 for name in self._labels("policies", "names")]
        return rows + [(f"{name}(...) returns",
                        self.values("policies", "made", name))
                       for name in self._labels("policies", "made")]

    def residual_rows(self, remat3: bool = False) -> list[Row]:
        """What each policy saves, as :func:`residual_summary` gives it, one row per policy.

        Args:
            remat3: Whether to give the residuals under the ``jax_remat3`` flag.

        Examples:
            >>> from remat_guide.site.versions import VersionReport
            >>> report = VersionReport({
            ...     "0.1": {"residuals": {"policy=None": ["f32[3] from the argument x"]}},
            ...     "0.2": {"residuals": {"policy=None": {"error": "TypeError: no"}}}})
            >>> report.residual_rows()
            [('policy=None', ['x', 'raises TypeError: no'])]
        """
        path = ("remat3", "residuals") if remat3 else ("residuals",)
        return [(label, self.values(*path, label, then=residual_summary)) for label in self._labels(*path)]

    def remat3_rows(self) -> list[Row]:
        """The ``jax_remat3`` flag: whether it exists, the primitive that wraps a checkpointed
        function in each case, and ``static_argnames`` under the flag (:data:`REMAT3_ITEMS`)."""
        return [(item, self.values("remat3", item)) for item in REMAT3_ITEMS]

    def export_rows(self) -> list[Row]:
        """The type of each name that ``jax.ad_checkpoint`` exports, sorted by name."""
        return [(f"jax.ad_checkpoint.{name}", self.values("ad_checkpoint_exports", name))
                for name in sorted(self._labels("ad_checkpoint_exports"))]

    def flag_rows(self) -> list[Row]:
        """The default of each configuration flag whose name has ``remat`` or ``checkpoint``."""
        return [(f"flag {name} (default)", self.values("config_flags", name))
                for name in self._labels("config_flags")]

    def top_level_rows(self) -> list[Row]:
        """The names of ``jax`` that have ``remat`` or ``checkpoint`` in them."""
        return [("names in jax with remat/checkpoint", self.values("top_level_names", then=", ".join))]

    def name_rows(self) -> list[Row]:
        """The rows of :meth:`VersionReport.export_rows`, :meth:`VersionReport.flag_rows` and
        :meth:`VersionReport.top_level_rows`, in one table."""
        return self.export_rows() + self.flag_rows() + self.top_level_rows()

    def format_rows(self) -> list[Row]:
        """The layout of a residual listing's line, with its location turned into placeholders."""
        return [("output of a primitive", self.values("residual_line_format"))]

    # -- what changed from one release to the next --

    def step(self, before: str, after: str) -> Step:
        """What differs between two of the releases, read from the rows of the page's tables.

        New and gone: parameters of ``jax.checkpoint`` and ``jax.remat``, names of
        ``jax.checkpoint_policies``, exports of ``jax.ad_checkpoint``, configuration flags and
        names of ``jax``. Changed: the rows that both releases have and whose values differ,
        grouped when they change the same way; for the residual tables, the policies whose
        residuals differ.

        Args:
            before: The older release, one of ``versions``.
            after: The newer release, one of ``versions``.

        Raises:
            ValueError: If a release is not one of ``versions``.

        Examples:
            >>> from remat_guide.site.versions import VersionReport
            >>> report = VersionReport({
            ...     "0.1": {"behaviour": {"concrete=True": "raises NotImplementedError: gone"},
            ...             "top_level_names": ["remat"]},
            ...     "0.2": {"behaviour": {"concrete=True": "raises TypeError: unknown"},
            ...             "top_level_names": ["checkpoint", "remat"]}})
            >>> print(report.step("0.1", "0.2").markdown())
            - **0.1 → 0.2**
              - New: [`jax.checkpoint`](reference-parameters).
              - Changed: [`concrete=True`](param-concrete-removed): `NotImplementedError` → `TypeError`.
        """
        for version in (before, after):
            if version not in self.versions:
                raise ValueError(f"{version!r} is not one of the releases {self.versions}")
        step = Step(before, after)
        i, j = self.versions.index(before), self.versions.index(after)

        def pairs(rows: Sequence[Row]) -> list[tuple[str, Any, Any]]:
            return [(label, values[i], values[j]) for label, values in rows]

        def presence(rows: Sequence[Row]) -> tuple[list[str], list[str]]:
            both = pairs(rows)
            return ([label for label, old, new in both if old is ABSENT and new is not ABSENT],
                    [label for label, old, new in both if old is not ABSENT and new is ABSENT])

        def changes(rows: Sequence[Row], name: Callable[[str], str]) -> None:
            for (old, new), labels in _transitions(pairs(rows)).items():
                step.changed.append(f"{_and([name(label) for label in labels])}: `{old}` → `{new}`")

        # The parameters of jax.checkpoint and jax.remat.
        owners: dict[str, dict[str, list[str]]] = {"new": {}, "gone": {}}
        for key, owner in (("checkpoint_parameters", "jax.checkpoint"), ("remat_parameters", "jax.remat")):
            rows = self.parameter_rows(key)
            for kind, labels in zip(("new", "gone"), presence(rows)):
                for label in labels:
                    owners[kind].setdefault(label, []).append(owner)
            for label, old, new in pairs(rows):
                if old is not ABSENT and new is not ABSENT and _values_differ([old, new]):
                    step.changed.append(f"{_code(label)} of {_code(owner)}: {_field_change(old, new)}")
        for kind, found in owners.items():
            getattr(step, kind).extend(f"parameter {_code(label)} of {_and([_code(o) for o in where])}"
                                       for label, where in found.items())
        changes(self.remat_rows()[:1], lambda label: label)
        changes(self.behaviour_rows(), _code)

        # The namespace jax.checkpoint_policies.
        policies = self.policy_rows()
        names = set(self._labels("policies", "names"))
        namespace = _code("jax.checkpoint_policies")
        for kind, labels in zip(("new", "gone"), presence([r for r in policies if r[0] in names])):
            if labels:
                getattr(step, kind).append(f"in {namespace}: {_and([_code(label) for label in labels])}")
        aliases = {first: second for version in (before, after)
                   for first, second in (self.item("policies", "aliases")[version]
                                         if isinstance(self.item("policies", "aliases")[version], list) else [])}

        def policy_names(labels: Sequence[str]) -> str:
            kept = [label for label in labels if aliases.get(label) not in labels]
            dropped = len(labels) - len(kept)
            return _and([_code(label) for label in kept]) + (
                "" if not dropped else " (and its alias)" if dropped == 1 else " (and their aliases)")

        for (old, new), labels in _transitions(pairs([r for r in policies if r[0] in names])).items():
            step.changed.append(f"{policy_names(labels)}: `{old}` → `{new}`")
        made = [r for r in policies if r[0].endswith("(...) returns")]
        by_kind: dict[tuple[str, str], list[str]] = {}
        for (old, new), labels in _transitions(pairs(made)).items():
            by_kind.setdefault((_kind(old), _kind(new)), []).extend(labels)
        for (old, new), labels in by_kind.items():
            calls = [_code(label.removesuffix(" returns")) for label in labels]
            step.changed.append(f"what {_and(calls)} return{'s' if len(calls) == 1 else ''}: {old} → {new}")
        changes([r for r in policies if r[0] not in names and r not in made and r[0] != "number of names"],
                lambda label: label)

        # What each policy saves, without and with jax_remat3.
        for remat3 in (False, True):
            both = [(label, old, new) for label, old, new in pairs(self.residual_rows(remat3=remat3))
                    if old is not ABSENT and new is not ABSENT]
            labels = [label for label, old, new in both if _values_differ([old, new])]
            flag = f" under {_code('jax_remat3')}" if remat3 else ""
            if len(labels) > 3:
                rows = f"all {len(both)}" if len(labels) == len(both) else f"{len(labels)} of the {len(both)}"
                step.changed.append(f"what is saved{flag} ({rows} rows both have)")
            elif labels:
                ways = [f"with {_code(label)}" for label in labels if label != "(no checkpoint)"]
                ways += ["without a checkpoint"] if "(no checkpoint)" in labels else []
                step.changed.append(f"what is saved{flag} {_and(ways)}")
        changes(self.remat3_rows(), lambda label: f"under {_code('jax_remat3')}, {label}")

        # Exports, flags, names of jax and the listing's layout.
        exports = self.export_rows()
        for kind, labels in zip(("new", "gone"), presence(exports)):
            getattr(step, kind).extend(_code(label) for label in labels)
        changes(exports, _code)
        flags = [(label.removeprefix("flag ").removesuffix(" (default)"), values)
                 for label, values in self.flag_rows()]
        for kind, labels in zip(("new", "gone"), presence(flags)):
            getattr(step, kind).extend(f"flag {_code(label)}" for label in labels)
        changes(flags, lambda label: f"the default of {_code(label)}")
        tops = self.item("top_level_names")
        old_top, new_top = (tops[v] if isinstance(tops[v], list) else [] for v in (before, after))
        step.new.extend(_code(f"jax.{n}") for n in new_top if n not in old_top)
        step.gone.extend(_code(f"jax.{n}") for n in old_top if n not in new_top)
        if _transitions(pairs(self.format_rows())):
            step.changed.append("the layout of a line of a residual listing")
        return step

    def changes(self) -> list[Step]:
        """What differs from each release to the next (:meth:`VersionReport.step`), oldest first."""
        return [self.step(before, after) for before, after in zip(self.versions, self.versions[1:])]

    def summary(self) -> str:
        """The changes from each release to the next as a Markdown list, one item per step."""
        return "\n".join(step.markdown() for step in self.changes())

    # -- checking the prose against the rows --

    def row(self, rows: Sequence[Row], label: str) -> dict[str, Any]:
        """The values of the row ``label``, by version.

        Raises:
            LookupError: If no row has that label.

        Examples:
            >>> from remat_guide.site.versions import VersionReport
            >>> report = VersionReport({"0.1": {}, "0.2": {}})
            >>> report.row([("a", ["x", "y"])], "a")
            {'0.1': 'x', '0.2': 'y'}
        """
        for row_label, values in rows:
            if row_label == label:
                return dict(zip(self.versions, values, strict=True))
        raise LookupError(f"no row {label!r} among {[row_label for row_label, _ in rows]}")

    def versions_where(self, rows: Sequence[Row], label: str, holds: Callable[[Any], Any]) -> list[str]:
        """The versions, in order, whose value in the row ``label`` satisfies ``holds``.

        Raises:
            LookupError: If no row has that label.

        Examples:
            >>> from remat_guide.site.versions import ABSENT, VersionReport
            >>> report = VersionReport({"0.1": {}, "0.2": {}, "0.3": {}})
            >>> report.versions_where([("a", ["x", ABSENT, "y"])], "a", lambda v: v != ABSENT)
            ['0.1', '0.3']
        """
        return [version for version, value in self.row(rows, label).items() if holds(value)]

    def table(self, first_header: str, rows: Sequence[Row], code: bool = True) -> ComparisonTable:
        """The rows as a table with one column per version (:func:`comparison_table`)."""
        return comparison_table(first_header, self.versions, rows, code=code)
