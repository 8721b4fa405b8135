"""Sphinx configuration of aotc's documentation site (`make docs`).

Sphinx with MyST and the Furo theme: the pages stay Markdown that GitHub renders too, Sphinx
is what PyTorch's and Python's own documentation are built with, and `-W -n` turns every
broken link or reference into an error. The reference pages are written from the code at
each build (docs/_ext/reference.py)."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))

project = "aotc"
author = "the aotc authors"
copyright = "2026, the aotc authors"
extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "_static"]
html_theme = "furo"
html_title = "aotc"
html_static_path = ["_static"]
html_css_files = ["aotc.css"]
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]


def setup(app):
    import reference

    app.connect("builder-inited", lambda app: reference.write(Path(app.srcdir) / "reference"))
