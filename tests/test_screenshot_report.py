"""tools/screenshot_report.py: the report in headless Chromium (skipped without a browser)."""
import importlib.util
import re
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "tools" / "screenshot_report.py"
_spec = importlib.util.spec_from_file_location("screenshot_report", _PATH)
shot = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(shot)


def test_prepared_page_starts_at_the_anchor_and_opens_sources():
    page = shot.prepared_page("<html><body><p>x</p></body></html>", 2, "g-fw-kernels")
    assert page.endswith("</body></html>") and '"g-fw-kernels"' in page and "n=2" in page
    assert "<script>" not in shot.prepared_page("<p>x</p>", 0).split("<p>x</p>")[0]


def test_missing_browser_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CHROMIUM", str(tmp_path / "no-such-browser"))
    page = tmp_path / "r.html"
    page.write_text("<!doctype html><p>hi</p>")
    assert shot.main([str(page), str(tmp_path / "r.png")]) == 2
    assert "no Chromium found" in capsys.readouterr().err


@pytest.mark.skipif(shot.find_chromium() is None, reason="no Chromium on this machine")
def test_screenshot_of_a_report(tmp_path):
    import torch

    import fusionstitch
    from fusionstitch.report.html import write_report_dir
    torch._dynamo.reset()
    with torch.no_grad():
        rep = fusionstitch.explain(lambda x: torch.softmax(x * 2, -1), torch.randn(4, 8),
                                   target="cpu")
    write_report_dir(rep, str(tmp_path / "r"), title="shot")
    page = tmp_path / "r" / "report.html"
    anchor = re.search(r'id="(g-[^"]*-kernels)"', page.read_text()).group(1)
    png = tmp_path / "r.png"
    shot.screenshot(str(page), str(png), width=800, height=600, anchor=anchor, open_sources=1)
    data = png.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000   # not a blank page
    assert not [p for p in (tmp_path / "r").iterdir() if p.name.startswith(".shot")]
