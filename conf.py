"""Sphinx configuration; the pages live in docs/ and are built with `sphinx-build -c . docs _build/html`."""

import pathlib
import sys

import jax

# The site's own Sphinx extensions live beside the pages, not in the installed package.
sys.path.insert(0, str(pathlib.Path(__file__).parent / "docs" / "_ext"))

project = "The jax.checkpoint field guide"
author = "The remat-guide authors"
copyright = "2026, The remat-guide authors"
release = version = "0.1"

extensions = [
    "myst_nb",  # loads myst_parser itself
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx_copybutton",
    "sphinx_design",
    "api_coverage",  # fails the build when JAX has a checkpoint API item the reference lacks
    "build_stability",  # a rebuild writes what a clean build writes (see the module)
    "notebook_downloads",  # each executed page's .ipynb in the theme's download menu
    "figure_store",  # names the page each kernel runs for; logs what the figure store gave the build
]

exclude_patterns = ["_hardware"]  # measured data and its provenance note, read by pages, not a page
myst_enable_extensions = ["colon_fence", "substitution"]
myst_heading_anchors = 3
myst_substitutions = {"jax_version": jax.__version__}

# Every page is executed at build time. jupyter-cache keeps the results beside the output
# folder (_build/.jupyter_cache for _build/html), so an unchanged page is not run again.
nb_execution_mode = "cache"
nb_execution_raise_on_error = True
nb_execution_show_tb = True
# The slowest page compiles a few dozen small XLA programs on 2 CPU cores; 10 minutes is
# far above that and still stops a hung kernel.
nb_execution_timeout = 600
# Printed text stays where it was printed, between the tables a cell displays (merging moves
# all of a cell's printed text before its first display). remat_guide.site.page_setup sends it
# once per display, so the pieces are the same on every build.
nb_merge_streams = False
# Error outputs are rendered like other text: the IPython traceback lexer fails (a warning)
# on JAX messages that quote code in backticks, and under `%xmode Minimal` there is no
# traceback to highlight.
nb_render_error_lexer = "myst-ansi"

autodoc_typehints = "none"  # signatures name jax.Array, which has no inventory offline
autodoc_member_order = "bysource"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True  # dataclass fields as plain fields, without cross-referenced types

# Copy doctest snippets without their prompts or outputs, so they paste into Python.
copybutton_prompt_text = r">>> |\.\.\. |\$ "
copybutton_prompt_is_regexp = True
copybutton_only_copy_prompt_lines = True

html_theme = "sphinx_book_theme"
html_title = "jax.checkpoint field guide"
html_theme_options = {
    "announcement": (
        f"Every output on this site was produced at build time by JAX {jax.__version__} on CPU."
    ),
    "use_download_button": True,
    "show_toc_level": 2,
    "show_navbar_depth": 2,  # the reference's pages listed under their caption, not folded away
}
html_show_sourcelink = True
html_static_path = ["docs/_static"]
html_css_files = [
    "remat.css",  # result tables, the forward/backward view, plots in dark mode
    "icons.css",  # the theme's few icons, drawn without Font Awesome's script or font
]
# docs/_templates/layout.html: the theme's page less Font Awesome's 1.5 MB script.
templates_path = ["docs/_templates"]
html_js_files = ["remat.js"]  # break points after underscores in the sidebars' code names
html_favicon = "docs/_static/favicon.svg"  # without one, browsers log a 404 for /favicon.ico
# Without an explicit default the theme logs a console error on a reader's first visit.
html_context = {"default_mode": "auto"}

nitpick_ignore = [
    ("py:class", "numpy.dtype"),  # a dataclass field type; NumPy's inventory is not available offline
]
