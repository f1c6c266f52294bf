"""The explorer page in a real headless Chromium: move each act's controls and check the numbers
against kvplan's own JSON, for a dense GQA model, an MLA model and a sliding-window hybrid.
Screenshots of every act land in test-artifacts/ (a CI artefact, looked at by a person)."""

from __future__ import annotations

import shutil

import pytest

from helpers import REPO, run_cli, run_json

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
ARTIFACTS = REPO / "test-artifacts"


@pytest.fixture(scope="module")
def browser():
    if not (CHROMIUM and DRIVER):
        pytest.skip("no chromium/chromedriver here (.ci/run installs Debian's packages)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1280,800",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    yield driver
    driver.quit()


UNITS = {"GiB": 2**30, "MiB": 2**20, "KiB": 1024, "B": 1}


def shows_bytes(shown: str, expected: float) -> bool:
    """The displayed figure equals `expected` to its printed precision (JS and Python round a
    half differently)."""
    value, unit = shown.split()
    digits = len(value.split(".")[1]) if "." in value else 0
    return abs(float(value) * UNITS[unit] - expected) <= 0.51 * 10**-digits * UNITS[unit]


def set_range(driver, element_id: str, index: int) -> None:
    driver.execute_script(
        "const e = document.getElementById(arguments[0]); e.value = arguments[1];"
        "e.dispatchEvent(new Event('input'));",
        element_id,
        index,
    )


def text(driver, element_id: str) -> str:
    return driver.find_element("id", element_id).text


def shot(driver, model: str, act: int) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    element = driver.find_element("id", f"act{act}")
    driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", element)
    element.screenshot(str(ARTIFACTS / f"explore-{model}-act{act}.png"))


@pytest.mark.parametrize("model", ["llama-3.1-8b", "deepseek-v3", "gemma-3-27b"])
def test_page_numbers_match_kvplan(browser, model, tmp_path):
    page = tmp_path / "kv.html"
    code, _, err = run_cli("explore", model, "--gpu", "h100", "--gpu", "h200", "--out", str(page))
    assert code == 0, err
    html = page.read_text()
    assert "<script src" not in html and "http" not in html.split("<script id")[0]  # no CDN
    browser.get(page.as_uri())

    # Act 1: a 1,000-token prompt, then three generated tokens
    set_range(browser, "a1-prompt", 1000)
    for _ in range(3):
        browser.find_element("id", "a1-generate").click()
    assert text(browser, "a1-tokens") == "1,003"
    size = run_json("size", model, "--ctx", "1003")
    expected = size["rows"][0]["kv_bytes_per_sequence"]
    assert browser.execute_script("return D.act1.bytes[1003]") == expected
    assert shows_bytes(text(browser, "a1-bytes"), expected)
    shot(browser, model, 1)

    # Act 2: KV heads
    if model == "deepseek-v3":
        assert not browser.find_element("id", "a2-heads").is_displayed()
        assert "latent of 576 values" in text(browser, "a2-intro")
    else:
        options = browser.execute_script("return D.act2.options.map(o => o.kv_heads)")
        set_range(browser, "a2-heads", 0)  # one KV head: MQA
        assert options[0] == 1 and text(browser, "a2-kind").startswith("MQA")
        query_heads = browser.execute_script("return D.act2.query_heads")
        if model == "llama-3.1-8b":  # full-attention stack: exactly H_q / 1
            assert text(browser, "a2-reduction") == f"{query_heads:.2f}×"
        set_range(browser, "a2-heads", len(options) - 1)  # every query head its own KV head
        assert (
            text(browser, "a2-kind").startswith("MHA") and text(browser, "a2-reduction") == "1.00×"
        )
        set_range(browser, "a2-heads", 0)
        what = run_json("whatif", model, "--ctx", "8192", "--apply", "mqa")
        mqa = next(r for r in what["rows"] if r["technique"] == "mqa")
        assert (
            browser.execute_script("return D.act2.options[0].bytes_per_sequence") == mqa["kv_bytes"]
        )
        assert shows_bytes(text(browser, "a2-per-seq"), mqa["kv_bytes"])
    shot(browser, model, 2)

    # Act 3: the H200 option, 32k context, 4 users
    browser.execute_script(
        "const s = document.getElementById('a3-gpu'); s.value = 1;"
        "s.dispatchEvent(new Event('input'));"
    )
    contexts = browser.execute_script("return D.act3.contexts")
    set_range(browser, "a3-ctx", contexts.index(32768))
    set_range(browser, "a3-users", browser.execute_script("return D.act3.users").index(4))
    option = browser.execute_script("return D.act3.gpus[1]")
    tp = option["tp"]
    layout = (
        ["--dp-attention", str(option["dp_attention"])]
        if option["dp_attention"] > 1
        else ["--tp", str(tp), "--pp", str(option["pp"])]
    )
    cap = run_json("capacity", model, "--gpu", "h200", *layout, "--ctx", "32k")
    assert text(browser, "a3-max") == f"{cap['max_concurrency']:,}"
    per_gpu = run_json("size", model, "--ctx", "32k", "--batch", "4", "--tp", str(tp))
    demand = per_gpu["rows"][0]["kv_bytes_total"]
    assert browser.execute_script("return D.act3.gpus[1].cache_bytes[32768][3]") == demand
    assert shows_bytes(text(browser, "a3-demand"), demand)
    expected_status = "overflow" if 4 > cap["max_concurrency"] else "fits"
    assert text(browser, "a3-status") == expected_status
    shot(browser, model, 3)

    # Act 4: fp8 and int4 at the same context and GPU
    for dtype, scenario in (("fp8", "KV fp8"), ("int4", "KV int4")):
        browser.find_element("id", f"a4-{dtype}").click()
        expected = next(r for r in cap["what_if"] if r["scenario"] == scenario)
        assert text(browser, "a4-users") == f"{expected['max_concurrency']:,}"
    assert text(browser, "a4-quality") == "lossy"
    shot(browser, model, 4)
    notes = browser.find_element("id", "notes").text
    assert "Capacity:" in notes


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["explore", "llama-3.1-7b"], "did you mean"),
        (["explore", "llama-3.1-8b", "--gpu", "h1000"], "unknown GPU"),
    ],
)
def test_bad_input(argv, needle, tmp_path):
    code, _, err = run_cli(*argv, "--out", str(tmp_path / "x.html"))
    assert code == 2 and needle in err and err.count("\n") == 1
