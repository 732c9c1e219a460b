"""The site's plots: each policy in one colour and one marker everywhere, every image described."""

import pathlib
import re
import xml.etree.ElementTree as ET

import pytest

from remat_guide.site.plots import policy_style

SVG = "{http://www.w3.org/2000/svg}"
XLINK = "{http://www.w3.org/1999/xlink}href"
_COLOUR = re.compile(r"(?:fill|stroke):\s*(#[0-9a-fA-F]{6})")


def _images(site_dir: pathlib.Path) -> dict[str, list[tuple[str, str]]]:
    """Each page's images, as (file, alt text); the alt text None when there is none."""
    found = {}
    for page in sorted(site_dir.rglob("*.html")):
        html = page.read_text(encoding="utf-8")
        article = html[html.find("<article"):html.find("</article>")]
        images = []
        for tag in re.findall(r"<img [^>]*>", article):
            src = re.search(r'src="([^"]+)"', tag).group(1)
            alt = re.search(r'alt="([^"]*)"', tag)
            images.append(((page.parent / src).resolve(), alt.group(1) if alt else None))
        if images:
            found[str(page.relative_to(site_dir))] = images
    return found


def _styles(svg: pathlib.Path) -> dict[str, tuple[str, str]]:
    """The colour and marker shape (its path) of each policy's group in a plot."""
    root = ET.parse(svg).getroot()
    markers = {path.get("id"): path.get("d") for path in root.iter(f"{SVG}path") if path.get("id")}
    styles = {}
    for group in root.iter(f"{SVG}g"):
        gid = group.get("id") or ""
        if not gid.startswith("policy:"):
            continue
        uses = list(group.iter(f"{SVG}use"))
        assert uses, f"{svg.name}: {gid} draws no marker"
        colours = set(_COLOUR.findall(uses[0].get("style", "")))
        assert len(colours) == 1, (svg.name, gid, colours)
        styles[gid.removeprefix("policy:")] = (colours.pop().lower(),
                                               markers[uses[0].get(XLINK).lstrip("#")])
    return styles


@pytest.fixture(scope="module")
def images(site_dir):
    return _images(site_dir)


def test_every_image_has_alt_text_that_describes_it(images):
    bare = {page: [(path.name, alt) for path, alt in found
                   if not alt or path.stem in alt or len(alt) < 20]
            for page, found in images.items()}
    assert {page: found for page, found in bare.items() if found} == {}


def test_each_policy_has_one_colour_and_one_marker_on_every_plot(images):
    seen: dict[str, set[tuple[str, str]]] = {}
    pages: dict[str, set[str]] = {}
    for page, found in images.items():
        for path, _ in found:
            if path.suffix == ".svg":
                for name, style in _styles(path).items():
                    seen.setdefault(name, set()).add(style)
                    pages.setdefault(name, set()).add(page)
    assert {name: styles for name, styles in seen.items() if len(styles) > 1} == {}
    assert {name: styles.pop()[0] for name, styles in seen.items()
            if next(iter(styles))[0] != policy_style(name).color.lower()} == {}
    # The plots of the guides draw their policies through remat_guide.site.plots.
    assert {"choosing.html", "depth.html", "accelerators.html"} <= set().union(*pages.values())
    assert len(pages["nothing_saveable"]) >= 2
