"""mkdocs hooks for the course site (mkdocs.yml names this file): four small steps, each
tested in tests/test_site.py:

- links from the notes to the repository's other files (`../../code/lecture09/04_pipeline.py`)
  work on the repository host but point outside the site: an existing target becomes its
  link text; a target that does not exist stays a link, so the strict build fails on it;
- formulas (`$...$`, `$$...$$`, a ```math fence; pymdownx.arithmatex marks them) become MathML
  at build time with latex2mathml: the browser draws them, no script, no CDN, no web font;
- a list item right under a paragraph starts a list, as on the repository host (CommonMark);
  Python-Markdown would read it as more of the paragraph, so a blank line goes before it;
- a line break between two Chinese characters inside a paragraph is dropped: the notes wrap
  Chinese lines in the source, and a browser would draw each break as a space.
"""

import html
import re
from pathlib import Path

from latex2mathml.converter import convert as latex_to_mathml

# --- links out of the site ------------------------------------------------------------------

FENCE = re.compile(r"^(```|~~~)")
# an inline code span (left as it is) or a link that is not an image: [text](target)
CODE_OR_LINK = re.compile(r"(`+)(?:.+?)\1|(?<!!)\[([^\]\n]+)\]\(([^)\s]+)\)")


def _outside_link_text(match, page_dir, docs_dir, repo):
    if match.group(1):                                   # a code span
        return match.group(0)
    text, target = match.group(2), match.group(3)
    if re.match(r"[a-z][a-z0-9+.-]*:|#|/", target):      # a URL, an anchor, an absolute path
        return match.group(0)
    path = (page_dir / target.split("#", 1)[0]).resolve()
    inside_site = path == docs_dir or docs_dir in path.parents
    if inside_site or repo not in path.parents or not path.exists():
        return match.group(0)                            # mkdocs checks it (strict: fails)
    return text


def links_outside_the_site_as_text(markdown, page_path, docs_dir, repo):
    """The Markdown with every link to an existing file of the repository `repo` (the folder of
    mkdocs.yml) outside `docs_dir` replaced by its link text; fenced code and code spans are
    left alone."""
    page_dir, docs_dir = Path(page_path).resolve().parent, Path(docs_dir).resolve()
    repo = Path(repo).resolve()
    out, fence = [], None
    for line in markdown.split("\n"):
        opener = FENCE.match(line.lstrip())
        if fence is None and opener:
            fence = opener.group(1)
        elif fence is not None and line.lstrip().startswith(fence):
            fence = None
        elif fence is None:
            line = CODE_OR_LINK.sub(lambda m: _outside_link_text(m, page_dir, docs_dir, repo), line)
        out.append(line)
    return "\n".join(out)


# --- a list right under a paragraph ------------------------------------------------------------

LIST_ITEM = re.compile(r"^\s*(?:[-*+]|1[.)])\s")


def lists_break_paragraphs(markdown):
    """A blank line before each list item whose block (the lines since the last blank line)
    began as a paragraph, not as a list item: "text\n- item" becomes "text\n\n- item". Items
    of one list ("- a\n  more\n- b") and fenced code are left alone."""
    out, fence, block_start = [], None, None
    for line in markdown.split("\n"):
        opener = FENCE.match(line.lstrip())
        if fence is None and opener:
            fence, block_start = opener.group(1), None
        elif fence is not None:
            if line.lstrip().startswith(fence):
                fence = None
        elif not line.strip():
            block_start = None
        elif block_start is None:
            block_start = line
        elif LIST_ITEM.match(line) and not LIST_ITEM.match(block_start) \
                and not block_start.lstrip().startswith(("|", ">", "<")):
            out.append("")
            block_start = line
        out.append(line)
    return "\n".join(out)


# --- formulas --------------------------------------------------------------------------------

# pymdownx.arithmatex (generic: true) writes <span class="arithmatex">\(x\)</span> inline and
# <div class="arithmatex">\[x\]</div> for a block, the TeX HTML-escaped.
ARITHMATEX = re.compile(
    r'<(span|div) class="arithmatex">\s*(\\\(|\\\[)(.*?)(\\\)|\\\])\s*</\1>', re.S)


def formulas_as_mathml(page_html):
    """Every formula arithmatex marked, as MathML (display block for $$ and ```math)."""
    def one(match):
        tag, tex = match.group(1), html.unescape(match.group(3)).strip()
        display = "block" if match.group(2) == "\\[" else "inline"
        mathml = latex_to_mathml(tex, display=display)
        return f'<{tag} class="arithmatex">{mathml}</{tag}>'
    return ARITHMATEX.sub(one, page_html)


# --- line breaks inside Chinese text ---------------------------------------------------------

HAN_OR_FULLWIDTH = r"\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uff00-\uffef"
BREAK_BETWEEN_HAN = re.compile(rf"(?<=[{HAN_OR_FULLWIDTH}])\n(?=[{HAN_OR_FULLWIDTH}])")
PRE = re.compile(r"(<pre\b.*?</pre>)", re.S)


def no_breaks_between_han(page_html):
    """Drop a newline between two Chinese characters (or full-width punctuation) outside
    <pre> blocks; everything else is left as it is."""
    parts = PRE.split(page_html)
    return "".join(p if i % 2 else BREAK_BETWEEN_HAN.sub("", p) for i, p in enumerate(parts))


# --- mkdocs events ---------------------------------------------------------------------------

def on_page_markdown(markdown, page, config, files):
    repo = Path(config["config_file_path"]).parent
    markdown = links_outside_the_site_as_text(markdown, page.file.abs_src_path, config["docs_dir"], repo)
    return lists_break_paragraphs(markdown)


def on_page_content(html_text, page, config, files):
    return no_breaks_between_han(formulas_as_mathml(html_text))
