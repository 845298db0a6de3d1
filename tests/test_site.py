"""The course site (issue 42, item 5): mkdocs.yml turns the notes in lectures/ into a site.

- The README's build command (`python3 -m mkdocs build --strict`) passes on the real notes,
  every page of the navigation is built, and a small site of our own with a broken link, a
  broken anchor and a missing image fails it, naming each (so strict mode does check them).
- The search index holds Chinese words as words (jieba), and no page loads anything from
  the web: no script, stylesheet, font or image with an http(s) address.
- mkdocs_hooks.py, unit by unit: formulas become MathML, links to the repository's other
  files become their text, a line break between two Chinese characters goes.
- In a real browser (Debian's chromium, driven by playwright, on a server at 127.0.0.1):
  lecture 9's index and a section page with a table (and a figure, once the notes embed
  one), and a small page of our own with a table, an image and a formula: every image
  loaded, no console error, no request leaves 127.0.0.1, the formula is drawn as math,
  searching 流水线 finds the pipeline section; screenshots go to pytest's tmp folder.

The hooks' unit tests are in the smoke set, the notes' build and the broken build in the
main part, the small site's build and the browser test in the slow tier (the browser
test marked `browser`; `python3 -m pytest`, what CI runs, includes both).
Without the docs requirements (`pip install -r requirements-docs.txt`) these tests skip
with that reason; the browser test skips where no chromium is installed (`.ci/run`
installs it: apt-get install chromium).
"""

import http.server
import importlib.util
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import threading
import zlib
from functools import partial
from pathlib import Path

import pytest

from conftest import ROOT
from notes_book import LECTURE09_NOTES_DIR, all_pages

DOCS_MODULES = ("mkdocs", "material", "pymdownx", "jieba", "latex2mathml", "mdx_truly_sane_lists")
MISSING = [m for m in DOCS_MODULES if importlib.util.find_spec(m) is None]
needs_docs = pytest.mark.skipif(
    bool(MISSING), reason=f"{', '.join(MISSING)} not installed: pip install -r requirements-docs.txt")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]
QUIET = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}

TABLE = re.compile(r"^\|.*\|\s*\n\|\s*:?-", re.M)
FIGURE = re.compile(r"!\[[^\]]*\]\((figures/[^)\s]+)")


def mkdocs_build(config, site_dir):
    """The README's build command, into site_dir: (exit status, mkdocs' log)."""
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config),
                          "--site-dir", str(site_dir)], cwd=ROOT, env=QUIET,
                         capture_output=True, text=True, timeout=300)
    return run.returncode, run.stdout + run.stderr


def nav_pages():
    """The Markdown files mkdocs.yml's nav lists, in order (relative to lectures/)."""
    return re.findall(r"^\s*- (?:[^:\n]+: )?([\w/]+\.md)\s*$",
                      (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), re.M)


def hooks():
    """mkdocs_hooks.py (beside mkdocs.yml), imported by path."""
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "mkdocs_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def page_url(md):
    """The address of lectures/<md> under the site's root ("lecture09/04_pipeline/")."""
    stem = md[:-3]
    if Path(stem).name in ("index", "README"):
        parent = str(Path(stem).parent)
        return "" if parent == "." else parent + "/"
    return stem + "/"


def built_page(site, md):
    """Where mkdocs (use_directory_urls) writes the page of lectures/<md>."""
    return site / page_url(md) / "index.html"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The real notes built with the README's command."""
    out = tmp_path_factory.mktemp("site") / "_site"
    status, log = mkdocs_build(ROOT / "mkdocs.yml", out)
    assert status == 0, "\n".join(l for l in log.splitlines() if "WARNING" in l or "Error" in l) or log
    return out


def tiny_png(width=6, height=4):
    """A valid RGB PNG, made by hand (no imaging library needed)."""
    rows = b"".join(b"\x00" + bytes([200, 80, 40]) * width for _ in range(height))

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


TOY_PAGE = """# 1 小站 A toy page

## 1.1 表和图

表 1：两行。

| 方案 scheme | 字节 bytes |
| --- | --- |
| fp32 | 4 |
| int8 | 1 |

![图 1：一张小图 a tiny picture](figures/tiny.png)

图 1 下面是公式：每个工作者发送 $\\frac{2(g-1)}{g} S$ 字节，整段公式

$$
T = \\alpha + \\beta \\cdot n
$$

见 [1.2 节](#12-第二部分) 和脚本 [04_pipeline.py](../code/lecture09/04_pipeline.py)。

## 1.2 第二部分

流水线并行 pipeline parallelism 把模型按层切开。
"""


def toy_site(tmp, page=TOY_PAGE, extra_pages=None):
    """A small site that inherits mkdocs.yml: one page (or more), a tiny PNG; the folder
    `code/` beside its docs so its link out of the site has a target."""
    docs = tmp / "docs"
    (docs / "figures").mkdir(parents=True)
    (tmp / "code" / "lecture09").mkdir(parents=True)
    (tmp / "code" / "lecture09" / "04_pipeline.py").write_text("# a script\n", encoding="utf-8")
    (docs / "figures" / "tiny.png").write_bytes(tiny_png())
    (docs / "index.md").write_text(page, encoding="utf-8")
    for name, text in (extra_pages or {}).items():
        (docs / name).write_text(text, encoding="utf-8")
    config = tmp / "mkdocs.yml"
    config.write_text(f"INHERIT: {ROOT / 'mkdocs.yml'}\ndocs_dir: docs\nnav:\n  - index.md\n"
                      + "".join(f"  - {n}\n" for n in (extra_pages or {}))
                      + f"hooks:\n  - {ROOT / 'mkdocs_hooks.py'}\n", encoding="utf-8")
    return config


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("toy")
    status, log = mkdocs_build(toy_site(tmp), tmp / "_site")
    assert status == 0, log
    return tmp / "_site"


# --- the build -------------------------------------------------------------------------------

@needs_docs
def test_the_notes_build_in_strict_mode_with_every_page_in_the_navigation(site):
    pages = nav_pages()
    lecture09 = [str(p.relative_to(LECTURE09_NOTES_DIR.parent)) for p in all_pages()]
    assert pages == ["README.md", "lecture01_base_model.md", *lecture09]
    for md in pages:
        html = built_page(site, md).read_text(encoding="utf-8")
        assert 'class="md-nav md-nav--secondary"' in html, md       # the page's table of contents
    index = built_page(site, "lecture09/index.md").read_text(encoding="utf-8")
    assert index.count('class="md-nav__link') >= len(pages)            # the whole navigation


@needs_docs
def test_strict_build_fails_on_a_broken_link_anchor_and_image(tmp_path):
    broken = TOY_PAGE + ("\n[没有这一页](nowhere.md) [没有这个锚点](other.md#no-such-part)"
                         "\n\n![没有这张图](figures/missing.png)\n")
    other = "# 2 另一页\n\n## 2.1 有这个锚点\n"
    status, log = mkdocs_build(toy_site(tmp_path, broken, {"other.md": other}), tmp_path / "_site")
    assert status != 0
    warnings = "\n".join(l for l in log.splitlines() if "WARNING" in l)
    for target in ("nowhere.md", "no-such-part", "figures/missing.png"):
        assert target in warnings, (target, log)


@needs_docs
def test_search_index_holds_chinese_words(site):
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    assert "\\u200b" in index["config"]["separator"]          # zero-width space splits words
    pages = {doc["location"].split("#")[0] for doc in index["docs"]
             if "\u200b流水线\u200b" in doc["text"] or doc["title"] == "流水线"}
    assert "lecture09/04_pipeline/" in pages, sorted(pages)


@needs_docs
def test_no_page_loads_anything_from_the_web(site):
    loads = re.compile(r"<(?:script|img|iframe|source)\b[^>]*\bsrc=\"((?:https?:)?//[^\"]*)\""
                       r"|<link\b[^>]*\bhref=\"((?:https?:)?//[^\"]*)\"|url\(\s*['\"]?((?:https?:)?//[^)'\"]*)")
    found = {}
    files = list(site.rglob("*.html")) + list(site.rglob("*.css"))
    assert len(files) > 15
    for f in files:
        for m in loads.finditer(f.read_text(encoding="utf-8", errors="replace")):
            found.setdefault(next(g for g in m.groups() if g), str(f.relative_to(site)))
    assert not found, found


# --- the hooks, unit by unit -----------------------------------------------------------------

@needs_docs
@pytest.mark.smoke
def test_hook_writes_formulas_as_mathml():
    formulas_as_mathml = hooks().formulas_as_mathml
    out = formulas_as_mathml('<p>a <span class="arithmatex">\\(x^2 &lt; y\\)</span> b</p>'
                             '<div class="arithmatex">\\[\n\\frac{1}{2}\n\\]</div>')
    assert '<span class="arithmatex"><math' in out and 'display="inline"' in out
    assert "<mo>&#x0003C;</mo>" in out and "<mfrac>" in out and 'display="block"' in out
    assert "\\(" not in out and "\\[" not in out
    assert formulas_as_mathml("<p>$5 and 3$</p>") == "<p>$5 and 3$</p>"      # nothing marked


@needs_docs
@pytest.mark.smoke
def test_hook_turns_links_out_of_the_site_into_their_text():
    links_outside_the_site_as_text = hooks().links_outside_the_site_as_text
    page = ROOT / "lectures" / "lecture09" / "04_pipeline.md"
    docs = ROOT / "lectures"
    md = ("见 [代码 4](../../code/lecture09/04_pipeline.py) 和 [5.7](05_decentralized.md#57) 和 "
          "[没有的](../../code/nothing.py) [web](https://example.org) `[x](../../README.md)`\n"
          "```\n[代码](../../code/lecture09/04_pipeline.py)\n```\n![图](../../README.md)")
    out = links_outside_the_site_as_text(md, page, docs, ROOT).split("\n")
    assert out[0] == ("见 代码 4 和 [5.7](05_decentralized.md#57) 和 [没有的](../../code/nothing.py) "
                      "[web](https://example.org) `[x](../../README.md)`")
    assert out[2] == "[代码](../../code/lecture09/04_pipeline.py)"      # code block untouched
    assert out[4] == "![图](../../README.md)"                          # images are mkdocs' to check


@needs_docs
@pytest.mark.smoke
def test_hook_lets_a_list_item_break_a_paragraph_as_on_the_repository_host():
    lists_break_paragraphs = hooks().lists_break_paragraphs
    md = "text\n- a\n- b\n  more\n- c\n\n  para\n- d\n```\nx\n- y\n```\n| t |\n- z"
    assert lists_break_paragraphs(md) == \
        "text\n\n- a\n- b\n  more\n- c\n\n  para\n\n- d\n```\nx\n- y\n```\n| t |\n- z"


@needs_docs
@pytest.mark.smoke
def test_hook_drops_line_breaks_between_chinese_characters_only():
    no_breaks_between_han = hooks().no_breaks_between_han
    page = "<p>拆到许多张卡上，\n拆开以后 and\n英文 words\nstay，\n（括号）</p><pre>代码\n里面</pre>"
    assert no_breaks_between_han(page) == \
        "<p>拆到许多张卡上，拆开以后 and\n英文 words\nstay，（括号）</p><pre>代码\n里面</pre>"


@pytest.mark.slow                       # its build is shared with the browser test below
@needs_docs
def test_the_toy_page_renders_its_table_figure_formulas_and_link(toy):
    html = (toy / "index.html").read_text(encoding="utf-8")
    assert "<table>" in html and 'src="figures/tiny.png"' in html
    assert html.count("<math ") == 2 and "<mfrac>" in html
    assert "脚本 04_pipeline.py" in html and "../code/" not in html
    assert 'href="#12-第二部分"' in html and 'id="12-第二部分"' in html


# --- in a real browser -----------------------------------------------------------------------

def _browser_skip_reason():
    if MISSING:
        return f"{', '.join(MISSING)} not installed: pip install -r requirements-docs.txt"
    if importlib.util.find_spec("playwright") is None:
        return "playwright not installed: pip install -r requirements-docs.txt"
    if not os.access(CHROMIUM, os.X_OK):
        return "no chromium at /usr/bin/chromium: apt-get install chromium (Debian)"
    return None


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class Served:
    """A folder served on 127.0.0.1 (a free port) in a thread, for the length of a with."""

    def __init__(self, folder):
        handler = partial(QuietHandler, directory=str(folder))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def pages_to_open():
    """Lecture 9's index; a section page with a table and a figure if one has both, else the
    first with a table and the first with a figure (none until the notes embed one)."""
    texts = {p: p.read_text(encoding="utf-8") for p in sorted(LECTURE09_NOTES_DIR.glob("[0-9][0-9]_*.md"))}
    tables = [p for p, t in texts.items() if TABLE.search(t)]
    figures = [p for p, t in texts.items() if FIGURE.search(t)]
    both = [p for p in tables if p in figures]
    picked = both[:1] or (tables[:1] + figures[:1])
    return ["lecture09/index.md"] + [f"lecture09/{p.name}" for p in picked]


class Watched:
    """A page whose console errors, uncaught errors, failed requests and requests that leave
    the server are collected."""

    def __init__(self, context, base):
        self.page, self.problems = context.new_page(), []
        self.page.set_viewport_size({"width": 1280, "height": 900})
        self.page.on("console", lambda m: m.type == "error" and self.problems.append(f"console: {m.text}"))
        self.page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        self.page.on("requestfailed", lambda r: self.problems.append(f"failed: {r.url} {r.failure}"))
        self.page.on("request", lambda r: r.url.startswith((base, "data:", "blob:"))
                     or self.problems.append(f"left 127.0.0.1: {r.url}"))

    def open(self, url):
        self.page.goto(url, wait_until="networkidle")
        images = self.page.evaluate("""() => Array.from(document.images).map(
            i => ({src: i.currentSrc || i.src, complete: i.complete, width: i.naturalWidth}))""")
        return images


@pytest.mark.slow
@pytest.mark.browser
@needs_docs
@pytest.mark.skipif(_browser_skip_reason() is not None, reason=str(_browser_skip_reason()))
def test_pages_in_chromium_load_every_image_without_a_console_error(site, toy, tmp_path_factory):
    from playwright.sync_api import sync_playwright
    shots = tmp_path_factory.mktemp("screenshots")
    home = tmp_path_factory.mktemp("chromium-profile")
    pages = pages_to_open()
    figure_pages = [md for md in pages if FIGURE.search((ROOT / "lectures" / md).read_text(encoding="utf-8"))]
    with sync_playwright() as pw, Served(site) as real, Served(toy) as small:
        context = pw.chromium.launch_persistent_context(
            str(home), executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
        context.set_default_timeout(20000)
        try:
            for md in pages:
                w = Watched(context, real.url)
                images = w.open(real.url + page_url(md))
                title = w.page.locator("article h1").first.inner_text()
                assert title.startswith(("第 9 讲", re.sub(r"^0", "", md.split("/")[1][:2]) + " ")), title
                assert all(i["complete"] and i["width"] > 0 for i in images), (md, images)
                parts = len(re.findall(r"^## ", (ROOT / "lectures" / md).read_text(encoding="utf-8"), re.M))
                toc = w.page.locator("nav.md-nav--secondary a.md-nav__link").count()
                assert toc >= parts, (md, toc, parts)                   # the page's contents
                if md in figure_pages:
                    assert any("/figures/" in i["src"] for i in images), (md, images)
                    w.page.locator("article img[src*='figures/']").first.scroll_into_view_if_needed()
                    w.page.screenshot(path=str(shots / f"{Path(md).stem}-figure.png"), animations="disabled")
                if TABLE.search((ROOT / "lectures" / md).read_text(encoding="utf-8")):
                    table = w.page.locator("article table").first
                    table.scroll_into_view_if_needed()
                    assert table.locator("tr").count() >= 2, md
                w.page.screenshot(path=str(shots / f"{Path(md).stem}.png"), animations="disabled")
                assert not w.problems, (md, w.problems)

            # search: 流水线 typed in the search box finds the pipeline section (jieba's words)
            w = Watched(context, real.url)
            w.open(real.url + "lecture09/")
            w.page.locator("input.md-search__input").fill("流水线")
            w.page.keyboard.press("End")                 # a key goes up: the search runs
            hits = w.page.locator(".md-search-result__item a")
            hits.first.wait_for(timeout=15000)
            hrefs = [hits.nth(i).get_attribute("href") for i in range(hits.count())]
            assert "04_pipeline" in hrefs[0], hrefs
            # as many pages found as hold the word: unsegmented, a word inside a run of Chinese
            # is no token of its own and only runs that begin with it are found (5 of 8 pages
            # when this was written)
            holding = sum("流水线" in (ROOT / "lectures" / md).read_text(encoding="utf-8") for md in nav_pages())
            found = w.page.locator(".md-search-result__meta").inner_text()
            assert int(re.search(r"\d+", found).group()) >= holding, (found, holding)
            w.page.screenshot(path=str(shots / "search-流水线.png"), animations="disabled")
            assert not w.problems, w.problems

            # the toy page: a table, a figure and two formulas drawn as math
            w = Watched(context, small.url)
            images = w.open(small.url)
            assert [i["width"] for i in images if "tiny.png" in i["src"]] == [6], images
            box = w.page.evaluate("""() => { const m = document.querySelector('math mfrac');
                if (!m) return null;
                const size = parseFloat(getComputedStyle(m.closest('p')).fontSize);
                return {height: m.getBoundingClientRect().height, font_size: size}; }""")
            assert box is not None, "no <math> with a fraction on the toy page"
            assert box["height"] > 1.3 * box["font_size"], box     # a fraction stacks: taller than a line
            w.page.screenshot(path=str(shots / "toy.png"), full_page=True, animations="disabled")
            assert not w.problems, w.problems
        finally:
            context.close()
    print(f"screenshots: {shots}")
