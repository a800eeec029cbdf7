"""The report as a small static site: plots/index.html (the answer) and one page per
hardware and model, the figures as SVG; open it from disk, no server needed.

Made from the Markdown pages the report writes (Python-Markdown), so the two never say
different things. Each page marks, once loaded, how many of its images did load
(`data-images-loaded` / `data-images-total` on <body>): a browser test reads them.
"""
from __future__ import annotations

import re
from pathlib import Path

from bench.cases import fileio

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 1.5em auto; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.86em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
img { max-width: 100%; height: auto; max-height: 48vh; }  /* a figure fits the first screen beside the answer */
h1 { font-size: 1.45em; margin: 0.3em 0 0.4em; }
p { margin: 0.5em 0; }
code { background: #f4f4f4; padding: 0 0.2em; }
"""

LOAD_CHECK = """
<script>
window.addEventListener("load", function () {
  var images = Array.prototype.slice.call(document.images);
  document.body.dataset.imagesTotal = images.length;
  document.body.dataset.imagesLoaded = images.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length;
  // Where the first table (on the report: the answer) and the first figure (the throughput
  // figure that stars the picks) end, against the window's height: a browser test reads whether
  // both are on the first screen.
  var table = document.querySelector("table"), figure = document.querySelector("img");
  document.body.dataset.viewportHeight = window.innerHeight;
  if (table) { document.body.dataset.answerBottom = Math.ceil(table.getBoundingClientRect().bottom); }
  if (figure) {
    document.body.dataset.figureBottom = Math.ceil(figure.getBoundingClientRect().bottom);
    document.body.dataset.figureSrc = figure.getAttribute("src");
  }
});
</script>
"""


def _escape_raw_html():
    """Python-Markdown passes HTML written in its text through as HTML. The report writes none:
    whatever looks like a tag came from a results file (a strategy named `<script>`), and is
    shown as text."""
    import markdown

    class EscapeRawHtml(markdown.Extension):
        def extendMarkdown(self, md):
            md.preprocessors.deregister("html_block")
            md.inlinePatterns.deregister("html")

    return EscapeRawHtml()


def page(markdown_text: str, title: str) -> str:
    import html

    import markdown

    # SVG figures (sharp at any size) and links to the HTML pages instead of the Markdown ones.
    text = re.sub(r"(!\[[^]]*\]\([^)]+)\.png\)", r"\1.svg)", markdown_text)
    text = re.sub(r"(\]\([^)]+)\.md\)", r"\1.html)", text).replace("REPORT.html)", "index.html)")
    body = markdown.markdown(text, extensions=["tables", _escape_raw_html()])
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style>{LOAD_CHECK}</head>\n<body>\n{body}\n</body></html>\n")


def write_html(out: Path) -> Path:
    """index.html from REPORT.md, and <hardware>/<model>.html from each details page."""
    for md in sorted(out.glob("*/*.md")):
        text = md.read_text()
        title = text.splitlines()[0].lstrip("# ") if text else md.stem
        fileio.atomic_write_bytes(md.with_suffix(".html"), page(text, title).encode())
    index = out / "index.html"
    fileio.atomic_write_bytes(index, page((out / "REPORT.md").read_text(), "parabench report").encode())
    return index
