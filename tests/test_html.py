"""The report's HTML pages, opened in a real headless browser (Chromium): the answer table is
there, every figure loads, and the page renders (a screenshot that is not blank)."""
import os
import re
import shutil
import subprocess

import pytest

from tests.conftest import run_cli
from tests.test_report import fixture_file  # noqa: F401 - the fixture, shared

BROWSER = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
if BROWSER is None and not os.environ.get("PARABENCH_REQUIRE_BROWSER"):
    pytest.skip("no Chromium here (CI installs Debian's chromium): apt install chromium", allow_module_level=True)

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--allow-file-access-from-files"]


def browse(*args, timeout=120):
    assert BROWSER, "PARABENCH_REQUIRE_BROWSER is set but no Chromium is installed"
    proc = subprocess.run([BROWSER, *FLAGS, *args], capture_output=True, text=True, timeout=timeout)
    return proc.stdout


@pytest.fixture
def site(fixture_file, tmp_path):  # noqa: F811
    out = tmp_path / "plots"
    proc = run_cli("report", str(fixture_file), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


def loaded(dom: str) -> tuple[int, int]:
    body = re.search(r"<body[^>]*>", dom).group(0)
    return (int(re.search(r'data-images-loaded="(\d+)"', body).group(1)),
            int(re.search(r'data-images-total="(\d+)"', body).group(1)))


def test_the_answer_page_shows_the_answer_table(site):
    dom = browse("--virtual-time-budget=10000", "--dump-dom", (site / "index.html").as_uri())
    assert re.search(r"<th[^>]*>recommended</th>", dom) and re.search(r"<th[^>]*>runner-up</th>", dom)
    assert 'href="nvidia-h200/resnet18-small.html"' in dom
    assert loaded(dom)[0] == loaded(dom)[1]


def test_every_figure_of_a_details_page_loads(site):
    page = site / "nvidia-h200" / "resnet18-small.html"
    dom = browse("--virtual-time-budget=10000", "--dump-dom", page.as_uri())
    got, total = loaded(dom)
    assert total >= 4 and got == total, (got, total)
    assert 'href="../index.html"' in dom and ".svg" in dom


def test_the_page_renders(site, tmp_path):
    from matplotlib.image import imread

    shot = tmp_path / "shot.png"
    browse("--window-size=1200,900", f"--screenshot={shot}", (site / "index.html").as_uri())
    pixels = imread(shot)
    assert pixels.shape[:2] == (900, 1200)
    assert pixels[..., :3].std() > 0.05  # text and tables, not a blank page


SEARCH = "results/reference/h200x2/answer/search-1.json"  # a default search on 2 H200s: graph and compile-ro rows


def test_the_answer_and_its_figure_are_on_the_first_screen(tmp_path):
    """At 1280 x 800, the report of a real search shows the answer's table and the throughput
    figure that stars the picks without scrolling. The screenshot is kept where
    PARABENCH_SCREENSHOT_DIR says."""
    out = tmp_path / "plots"
    proc = run_cli("report", SEARCH, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    page = (out / "index.html").as_uri()
    dom = browse("--window-size=1280,800", "--virtual-time-budget=10000", "--dump-dom", page)
    body = re.search(r"<body[^>]*>", dom).group(0)
    height = int(re.search(r'data-viewport-height="(\d+)"', body).group(1))
    answer = int(re.search(r'data-answer-bottom="(\d+)"', body).group(1))
    figure = int(re.search(r'data-figure-bottom="(\d+)"', body).group(1))
    assert "throughput.svg" in re.search(r'data-figure-src="([^"]+)"', body).group(1)
    first_table = dom.split("<table>", 1)[1].split("</table>", 1)[0]
    assert "ddp+graph+CL+fused" in first_table and "single+compile-ro+CL+fused" in first_table
    assert 600 < height <= 800 and answer <= figure <= height, (answer, figure, height)
    shot = tmp_path / "first-screen-1280x800.png"
    browse("--window-size=1280,800", "--virtual-time-budget=10000", f"--screenshot={shot}", page)
    assert shot.stat().st_size > 10_000
    if os.environ.get("PARABENCH_SCREENSHOT_DIR"):
        shutil.copy(shot, os.environ["PARABENCH_SCREENSHOT_DIR"])
