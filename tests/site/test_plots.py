"""The site's plots: each policy in one colour and one marker everywhere, described, legible on a phone."""

import pathlib
import re
import xml.etree.ElementTree as ET

import pytest
from test_browser import PHONE

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


# Every name the site's plots draw with a style of their own (aliases and the spellings of
# a family, such as "per-layer checkpoint" or "names: a, b", share theirs).
SITE_NAMES = [
    "no checkpoint", "everything_saveable", "dots_saveable", "dots_with_no_batch_dims_saveable",
    "nothing_saveable", "offload_dot_with_no_batch_dims", "save_only_these_names",
    "save_any_names_but_these", "save_and_offload_only_these_names", "save_from_both_policies",
    "checkpoint_dot_policy", "recursive, sqrt(N) (2 levels)", "recursive, binary (log2 N levels)",
    "save_out_proj", "save_qkv_proj", "save_dot_except_mlp", "qkv_proj_offloaded",
    "minimal_offloaded", "plan_names", "set of names",
]


def test_no_two_names_share_a_colour_and_a_marker():
    styles = {name: policy_style(name) for name in SITE_NAMES}
    pairs = {}
    for name, style in styles.items():
        pairs.setdefault(style, []).append(name)
    assert {style: names for style, names in pairs.items() if len(names) > 1} == {}
    # Names without a fixed style get a pair that no fixed name has.
    others = ["a preset of another framework", "save_mlp", "offloaded_everything", "x"]
    assert not {policy_style(name) for name in others} & set(styles.values())
    # No line markers, which vanish at a phone's size.
    assert not {style.marker for style in styles.values()} & {",", "1", "2", "3", "4", "+", "x"}


def test_aliases_and_spellings_share_their_policys_style():
    assert policy_style("per-layer checkpoint") == policy_style("nothing_saveable")
    assert policy_style("checkpoint_dots") == policy_style("dots_saveable")
    assert policy_style("names: attn_out") == policy_style("save_only_these_names('attn_out')")
    assert policy_style("offload mlp_hidden") == policy_style("save_and_offload_only_these_names")
    with pytest.raises(TypeError, match="name"):
        policy_style(None)


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


def test_the_series_of_one_plot_differ_in_colour_and_in_marker(images):
    """Either the colour or the marker alone tells a plot's series apart (colour-blind readers)."""
    shared = {}
    for page, found in images.items():
        for path, _ in found:
            if path.suffix != ".svg":
                continue
            styles = _styles(path)
            for part, what in ((0, "colour"), (1, "marker")):
                values = [style[part] for style in styles.values()]
                twins = sorted(name for name, style in styles.items()
                               if values.count(style[part]) > 1)
                if twins:
                    shared[page, path.name[:8], what] = twins
    assert shared == {}


# The type of an image shown in a page, in CSS px as drawn: the SVG is laid over the image
# at the image's size, and each <text>'s font size is scaled by its transform to the screen.
_TYPE_SIZES = r"""async (img) => {
  const doc = new DOMParser().parseFromString(await (await fetch(img.src)).text(),
                                              "image/svg+xml");
  const svg = document.importNode(doc.documentElement, true);
  const box = img.getBoundingClientRect();
  svg.setAttribute("width", box.width);
  svg.setAttribute("height", box.height);
  document.body.appendChild(svg);
  const sizes = {tick: [], legend: [], other: [], width: box.width,
                 ticks: svg.querySelectorAll("g[id^=xtick], g[id^=ytick]").length};
  for (const text of svg.querySelectorAll("text")) {
    const kind = text.closest("g[id^=xtick], g[id^=ytick]") ? "tick"
               : text.closest("g[id^=legend]") ? "legend" : "other";
    const m = text.getScreenCTM();
    sizes[kind].push(parseFloat(getComputedStyle(text).fontSize) * Math.hypot(m.a, m.b));
  }
  sizes.glyphs = svg.querySelectorAll("g[id^=text_] > g[transform*=scale]").length;
  svg.remove();
  return sizes;
}"""


def test_plot_type_is_at_least_10px_on_a_phone(images, browser, base_url):  # noqa: F811
    """At 390 px, every plot's tick labels, legend and other text come out >= 10 CSS px."""
    plots = {page for page, found in images.items()
             if any(path.suffix == ".svg" and 'id="xtick_1"' in path.read_text(encoding="utf-8")
                    for path, _ in found)}
    assert {"choosing.html", "depth.html", "fit.html"} <= plots
    context = browser.new_context(viewport={"width": PHONE, "height": 900})
    page = context.new_page()
    small, measured = {}, 0
    try:
        for name in sorted(plots):
            page.goto(base_url + name, wait_until="networkidle")
            for i, image in enumerate(page.locator("article div.cell_output img").all()):
                sizes = image.evaluate(_TYPE_SIZES)
                if not sizes["ticks"]:
                    continue  # not a plot with axes
                assert sizes["glyphs"] == 0 and sizes["tick"], f"{name} #{i}: text as paths"
                assert sizes["width"] <= PHONE - 20, (name, i, sizes["width"])
                measured += 1
                for kind in ("tick", "legend", "other"):
                    if sizes[kind] and min(sizes[kind]) < 10:
                        small[name, i, kind] = round(min(sizes[kind]), 1)
    finally:
        context.close()
    assert measured >= 5
    assert small == {}
