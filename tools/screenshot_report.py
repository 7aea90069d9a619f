"""Render a fusionstitch HTML report to PNG with headless Chromium (a look in a real browser).

    python tools/screenshot_report.py fusionstitch_demo/mlp/report.html out.png
        [--width 1280] [--height 2200] [--anchor kernels] [--open 1]

`--anchor ID` starts the picture at an element id (a graph `g-<graph>`, its `-groups`,
`-kernels` or `-boundaries` heading, a kernel `g-<graph>-k<group>`), or at the first
element whose id ends in `-ID` (`--anchor kernels`: the first graph's kernels):
everything before it is removed, because headless Chromium's --screenshot paints a
scrolled page blank.
`--open N` opens the first N kernel sources (<details class="src">) so that the
picture shows code. The page is copied beside itself with those changes (relative
links keep working) and removed afterwards.

Needs a Chromium binary: $CHROMIUM, else chromium / chromium-browser / google-chrome
on PATH (Debian: `apt-get install -y chromium`). Nothing in the package or the tests
needs it. Exit status 2 when no browser is found.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """The Chromium binary to use, or None."""
    env = os.environ.get("CHROMIUM")
    if env:
        return shutil.which(env) or (env if os.access(env, os.X_OK) else None)
    return next((p for p in map(shutil.which, BROWSERS) if p), None)


# Removes every element before the anchor (its earlier siblings, then theirs up the tree),
# then opens the first N kernel sources left.
_SCRIPT = ("<script>(function(){{var a={anchor},n={open},e=a&&(document.getElementById(a)"
           "||document.querySelector('[id$=\"-'+a+'\"]'));"
           "while(e&&e.tagName!=='BODY'){{while(e.previousElementSibling)"
           "e.previousElementSibling.remove();e=e.parentElement;}}"
           "var d=document.querySelectorAll('details.src');"
           "for(var i=0;i<d.length&&i<n;i++)d[i].open=true;}})()</script>")


def prepared_page(html: str, open_sources: int, anchor: str | None = None) -> str:
    """The page starting at `anchor`, with the first `open_sources` kernel sources open."""
    script = _SCRIPT.format(anchor=json.dumps(anchor), open=int(open_sources))
    return (html.replace("</body>", script + "</body>", 1) if "</body>" in html
            else html + script)


def screenshot(page: str, png: str, *, width: int = 1280, height: int = 2200,
               anchor: str | None = None, open_sources: int = 0,
               browser: str | None = None, timeout: float = 120) -> None:
    """Write a `width` x `height` PNG of the HTML file `page` (raises on failure)."""
    browser = browser or find_chromium()
    if browser is None:
        raise FileNotFoundError("no Chromium found: set $CHROMIUM or install chromium "
                                "(Debian: apt-get install -y chromium)")
    page = os.path.abspath(page)
    with open(page, encoding="utf-8") as f:
        html = prepared_page(f.read(), open_sources, anchor)
    fd, copy = tempfile.mkstemp(suffix=".html", prefix=".shot-", dir=os.path.dirname(page))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(html)
        url = "file://" + copy
        with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
            cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu",
                   "--hide-scrollbars", "--force-device-scale-factor=1",
                   f"--user-data-dir={profile}", f"--window-size={width},{height}",
                   f"--screenshot={os.path.abspath(png)}", url]
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if run.returncode != 0 or not os.path.exists(png):
            raise RuntimeError(f"{browser} failed ({run.returncode}): {run.stderr[-2000:]}")
    finally:
        os.remove(copy)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("page", help="an HTML report (report.html, or the demo's index.html)")
    p.add_argument("png", help="where to write the screenshot")
    p.add_argument("--width", type=int, default=1280)
    p.add_argument("--height", type=int, default=2200)
    p.add_argument("--anchor", help="element id the picture starts at")
    p.add_argument("--open", type=int, default=0, dest="open_sources",
                   help="open the first N kernel sources")
    args = p.parse_args(argv)
    try:
        screenshot(args.page, args.png, width=args.width, height=args.height,
                   anchor=args.anchor, open_sources=args.open_sources)
    except FileNotFoundError as e:
        print(f"screenshot_report: {e}", file=sys.stderr)
        return 2
    print(args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
