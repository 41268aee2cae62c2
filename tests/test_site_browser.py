"""The built documentation site as a reader sees it, in a real browser (Debian's chromium, headless, driven by
Playwright): no table swallows the paragraph after it, no code block or table hides part of itself behind a
scroll bar, every picture is loaded and opens at full size, and no page logs an error to the console.

Playwright drives the machine's own chromium (``apt-get install chromium``; .ci/run installs it): it downloads
no browser of its own. The site is served from 127.0.0.1, as ``mkdocs serve`` would.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import shutil
import threading

import pytest

VIEWPORT = {"width": 1280, "height": 900}  # a laptop's browser window
CHROMIUM = shutil.which("chromium")
# In the page: each problem a reader would see, one string each.
PROBLEMS = """() => {
  const content = document.querySelector("article.md-content__inner");
  const problems = [];
  const text = (el) => el.textContent.trim().replace(/\\s+/g, " ").slice(0, 60);
  for (const block of content.querySelectorAll("pre > code")) {
    if (block.scrollWidth > block.clientWidth + 1)
      problems.push(`code block hides ${block.scrollWidth - block.clientWidth} px of its lines: ${text(block)}`);
  }
  for (const table of content.querySelectorAll("table")) {
    const frame = table.closest(".md-typeset__scrollwrap") || table;
    if (frame.scrollWidth > frame.clientWidth + 1)
      problems.push(`table hides ${frame.scrollWidth - frame.clientWidth} px: ${text(table.rows[0])}`);
    const columns = table.rows[0].cells.length;
    for (const row of Array.from(table.rows).slice(1)) {
      const filled = Array.from(row.cells).filter((cell) => cell.textContent.trim()).length;
      if (columns > 1 && filled === 1 && row.cells[0].textContent.trim().split(" ").length > 8)
        problems.push(`a paragraph swallowed as a table row: ${text(row)}`);
    }
  }
  for (const image of content.querySelectorAll("img")) {
    if (!image.complete || image.naturalWidth === 0) { problems.push(`picture not loaded: ${image.src}`); continue; }
    const link = image.closest("a");
    const opens = link && new URL(link.href, location.href).href === new URL(image.src, location.href).href;
    if (image.clientWidth < image.naturalWidth && !opens)
      problems.push(`picture shown at ${Math.round(100 * image.clientWidth / image.naturalWidth)} % and no link to it at full size: ${image.src}`);
  }
  return problems;
}"""


@pytest.fixture(scope="module")
def site(built_site):
    """The site as CI builds it, served on 127.0.0.1: its base URL and its pages."""
    handler = functools.partial(_QuietHandler, directory=str(built_site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    pages = sorted(
        path.parent.relative_to(built_site).as_posix().removeprefix(".") for path in built_site.rglob("index.html")
    )
    try:
        yield f"http://127.0.0.1:{server.server_port}", pages
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:  # noqa: A002 (the base class's name)
        """No request lines on the test's output."""


@contextlib.contextmanager
def _browser_tab():
    """A chromium tab of the viewport's size, and the list its console errors go to."""
    playwright = pytest.importorskip("playwright.sync_api", reason="the docs extra is not installed")
    if CHROMIUM is None:
        pytest.skip("no chromium on this machine (apt-get install chromium)")
    with playwright.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])  # root in CI
        try:
            tab = browser.new_page(viewport=VIEWPORT)
            errors: list[str] = []
            tab.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
            tab.on("pageerror", lambda error: errors.append(str(error)))
            yield tab, errors
        finally:
            browser.close()


def test_every_page_reads_whole_in_a_browser(site):
    base, pages = site
    assert len(pages) > 20, pages
    found: dict[str, list[str]] = {}
    with _browser_tab() as (tab, errors):
        for path in pages:
            errors.clear()
            response = tab.goto(f"{base}/{path}", wait_until="load")
            assert response is not None and response.ok, path
            problems = tab.evaluate(PROBLEMS) + [f"console error: {error}" for error in errors]
            if problems:
                found[path or "/"] = problems
    assert found == {}, "\n".join(f"{path}: {problem}" for path, problems in found.items() for problem in problems)


def test_the_check_sees_what_a_reader_would(site):
    """The check itself: the home page with each problem planted in its article (under the site's own styles), one
    finding each."""
    base, _ = site
    planted = f"""
      <pre><code style="white-space: pre">{"x" * 400}</code></pre>
      <table><tr><th>a</th><th>b</th></tr><tr><td>one paragraph of prose that became a row of the table</td><td></td></tr></table>
      <img src="{base}/assets/report.png" width="300">"""
    with _browser_tab() as (tab, errors):
        tab.goto(f"{base}/", wait_until="load")
        assert tab.evaluate(PROBLEMS) == [] and errors == []
        tab.evaluate(
            """(planted) => {
              document.querySelector("article.md-content__inner").innerHTML = planted;
              console.error("planted");
              return new Promise((loaded) => document.querySelector("article img").onload = loaded);
            }""",
            planted,
        )
        problems = tab.evaluate(PROBLEMS)
    kinds = sorted(problem.split(":")[0].split(" hides")[0].split(" shown")[0] for problem in problems)
    assert kinds == ["a paragraph swallowed as a table row", "code block", "picture"], problems
    assert errors == ["planted"]
