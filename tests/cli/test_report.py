"""`tilefoundry report` renders in a real browser: headless Chromium loads the page offline and
its DOM must hold the drawing's parts (nodes, fusion regions, edge labels, the highlighted
Reshard with its collective, the per-device shape table).

Chromium policy: `.ci/run` installs Debian's `chromium` when apt-get is available and then sets
TILEFOUNDRY_REQUIRE_CHROMIUM=1, so in that CI a missing browser is a failure with the reason;
anywhere else (a laptop, CI without apt) these tests skip and say how to enable them.
"""

import os
import re
import shutil
import subprocess

import pytest

REQUIRE_ENV = "TILEFOUNDRY_REQUIRE_CHROMIUM"
CHROMIUM = next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None
)


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        message = "headless Chromium is not installed (apt-get install -y chromium)"
        if os.environ.get(REQUIRE_ENV):
            pytest.fail(f"{message}, but {REQUIRE_ENV} says CI installed it")
        pytest.skip(message)
    return CHROMIUM


def chromium(browser: str, *args: str) -> subprocess.CompletedProcess:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run"]
    return subprocess.run(
        [browser, *flags, *args], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.fixture(scope="module")
def megatron_page(tmp_path_factory):
    from cli.conftest import tilefoundry

    page = tmp_path_factory.mktemp("report") / "megatron.html"
    done = tilefoundry("report", "examples/megatron_mlp.py", "-o", str(page))
    assert done.returncode == 0, done.stderr
    return page


@pytest.mark.slow
def test_report_is_self_contained(megatron_page):
    text = megatron_page.read_text()
    assert "<svg" in text
    assert not re.search(r"(src|href)=\"https?:", text)  # nothing fetched from the network
    assert "<script" not in text


def test_report_renders_with_its_structure(browser, megatron_page):
    done = chromium(browser, "--dump-dom", megatron_page.as_uri())
    assert done.returncode == 0, done.stderr
    dom = done.stdout
    nodes = re.findall(r'<g class="node (\w+)" id="n\d+" data-title="([^"]*)"', dom)
    assert ("param", "w1") in nodes and ("param", "w2") in nodes
    assert ("op", "h") in nodes and ("output", "return") in nodes
    assert [t for kind, t in nodes if kind == "reshard"] == ["reshard"]
    assert "tp: all-reduce(sum)" in dom  # the Reshard's collective, on its node
    assert dom.count('<g class="region"') == 1 and 'data-kind="contraction"' in dom
    labels = re.findall(r'<g class="edge-label".*?</g>', dom)
    assert any("f32[16, 64]" in g and "tp:P(sum)" in g for g in labels)  # the pending partial
    assert any("f32[64, 256]" in g and "tp:S1" in g for g in labels)  # w1 split by columns
    assert len(re.findall(r'<g class="edge"', dom)) == 7
    assert '<table id="local-shapes">' in dom and "[16, 32] × 8" in dom


def test_report_screenshot_is_drawn(browser, megatron_page, tmp_path):
    shot = tmp_path / "report.png"
    done = chromium(
        browser, f"--screenshot={shot}", "--window-size=1000,900", megatron_page.as_uri()
    )
    assert done.returncode == 0, done.stderr
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
