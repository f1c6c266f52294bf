"""The explorer: its embedded data against independent values (hand-computed from the model's
shapes, or kvplan's other commands), the page self-contained, and the page itself in a real
headless Chromium: every act's controls, the GPU-count buttons, the memory wall on overflow, the
quiz, a 400-pixel-wide screen. Screenshots of every act at 1280 and 400 pixels land in
test-artifacts/ (a CI artefact, looked at by a person)."""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest

from helpers import FITS_OR_NOT, REPO, llama_like, run_cli, run_json

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
ARTIFACTS = REPO / "test-artifacts"
GIB = 2**30
KIB = 2**10
SECTIONS = ("hook", "act1", "act2", "act3", "act4", "why", "quiz")

# Llama-3.1-70B: 80 layers, 8 KV heads of 128, bf16; its checkpoint's total_size (the HF
# safetensors index) is 141,107,412,992 bytes.
L70_LAYERS, L70_KV_HEADS, L70_HEAD_DIM = 80, 8, 128
L70_WEIGHTS_BYTES = 141_107_412_992


def l70_bytes_per_token(tp: int) -> int:
    """2 (K and V) x layers x KV heads per GPU x head_dim x 2 bytes; one head per GPU past 8."""
    return 2 * L70_LAYERS * max(1, L70_KV_HEADS // tp) * L70_HEAD_DIM * 2


def page_of(model: str, tmp_path, *gpus: str) -> str:
    page = tmp_path / f"{model}.html"
    argv = [arg for gpu in gpus or ("h100", "h200") for arg in ("--gpu", gpu)]
    code, _, err = run_cli("explore", model, *argv, "--out", str(page))
    assert code == 0, err
    return page


def embedded(html: str) -> dict:
    block = re.search(
        r'<script id="kvplan-data" type="application/json">(.*?)</script>', html, re.S
    )
    return json.loads(block.group(1))


def explore_json(model: str, *gpus: str) -> dict:
    argv = [arg for gpu in gpus or ("h100", "h200") for arg in ("--gpu", gpu)]
    code, out, err = run_cli("explore", model, *argv, "--format", "json")
    assert code == 0, err
    return json.loads(out)


# ---- the data, without a browser ---------------------------------------------------------------
@pytest.mark.parametrize("model", ["llama-3.1-70b", "deepseek-v3"])
def test_page_is_self_contained_and_embeds_the_json_output(model, tmp_path):
    html = page_of(model, tmp_path).read_text()
    assert not re.search(r"https?:|//cdn|<script src|<link|<img|@import|url\(", html)
    assert embedded(html) == explore_json(model)


def test_llama_70b_on_h100_opens_on_tp4_where_a_128k_conversation_fits():
    data = explore_json("llama-3.1-70b", "h100")
    gpu = data["deploy"]["gpus"][0]
    assert [o["tp"] for o in gpu["options"]] == [1, 2, 4, 8]  # the H100 profile's 8 per node
    assert gpu["gpus_per_node"] == 8 and gpu["gpus_per_node_stated"]
    opening = gpu["options"][gpu["chosen"]]
    assert (opening["tp"], opening["pp"], gpu["reason"]) == (4, 1, "smallest-tp")
    i128 = data["deploy"]["contexts"].index(131072)
    # TP 2 cannot hold one 128k conversation beside its weights; TP 4 can
    tp2 = gpu["options"][1]
    assert tp2["pool_bytes"] < 128 * 1024 * l70_bytes_per_token(2)
    assert opening["pool_bytes"] >= 128 * 1024 * l70_bytes_per_token(4)
    cap = run_json("capacity", "llama-3.1-70b", "--gpu", "h100", "--tp", "4", "--ctx", "128k")
    fp8 = next(r for r in cap["what_if"] if r["kv_dtype"] == "fp8")
    assert opening["max_users"]["fp8"][i128] == fp8["max_concurrency"] >= 1


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_per_gpu_weights_and_cache_for_each_tp(tp):
    data = explore_json("llama-3.1-70b", "h100")
    contexts = data["deploy"]["contexts"]
    option = next(o for o in data["deploy"]["gpus"][0]["options"] if o["tp"] == tp)
    assert option["weights_bytes"] == pytest.approx(L70_WEIGHTS_BYTES / tp)
    assert option["kv_bytes_per_token"]["bf16"] == l70_bytes_per_token(tp)
    assert option["kv_bytes_per_token"]["fp8"] == l70_bytes_per_token(tp) // 2
    assert option["kv_heads_per_gpu"] == L70_KV_HEADS // tp and option["kv_head_copies"] == 1
    for i, ctx in enumerate(contexts):
        assert option["kv_bytes_per_sequence"][i] == ctx * l70_bytes_per_token(tp)
    cap = run_json(
        "capacity", "llama-3.1-70b", "--gpu", "h100", "--tp", str(tp), "--ctx", "32k",
        expect=FITS_OR_NOT,
    )  # fmt: skip
    assert option["pool_bytes"] == pytest.approx(cap["kv_pool_bytes_per_gpu"])
    assert option["usable_bytes"] == pytest.approx(cap["usable_bytes_per_gpu"])
    i32 = contexts.index(32768)
    for row in (r for r in cap["what_if"] if r["kind"] == "kv_dtype"):
        assert option["max_users"][row["kv_dtype"]][i32] == row["max_concurrency"]


def test_kv_heads_replicate_past_their_count_and_the_node_comes_from_the_profile(tmp_path):
    profile = tmp_path / "h100x16.yaml"
    text = (REPO / "hardware_profiles" / "h100-sxm.yaml").read_text()
    text = re.sub(r"(?m)^name: .*$", "name: H100 SXM (16 per node)", text)
    text = re.sub(r"(?m)^aliases: .*$", "aliases: []", text)
    text = re.sub(r"(?m)^gpus_per_node: .*$", "gpus_per_node: 16", text)
    profile.write_text(text)
    data = explore_json("llama-3.1-70b", str(profile))
    gpu = data["deploy"]["gpus"][0]
    assert gpu["gpus_per_node"] == 16 and gpu["gpus_per_node_stated"]
    tp16 = gpu["options"][-1]
    assert tp16["tp"] == 16 and tp16["kv_heads_per_gpu"] == 1 and tp16["kv_head_copies"] == 2
    assert tp16["kv_bytes_per_token"]["bf16"] == l70_bytes_per_token(8)  # stops shrinking


def test_mla_latent_is_replicated_by_every_tp_rank_and_dp_attention_opens_when_needed():
    # DeepSeek-V3: 61 layers, one latent of 512 + 64 values, bf16 cache; fp8 weights that no
    # single 8 x H100 node holds with room for a 128k conversation
    data = explore_json("deepseek-v3", "h100")
    gpu = data["deploy"]["gpus"][0]
    by_layout = {(o["tp"], o["pp"], o["dp_attention"]): o for o in gpu["options"]}
    for tp in (1, 2, 4, 8):
        option = by_layout[(tp, 1, 1)]
        assert option["kv_bytes_per_token"]["bf16"] == 61 * 576 * 2  # whole latent on each rank
        assert option["kv_head_copies"] == tp and not option["holds_long_context"]
    opening = gpu["options"][gpu["chosen"]]
    assert (opening["dp_attention"], opening["num_gpus"], gpu["reason"]) == (16, 16, "dp-attention")
    # the 16-GPU layouts weighed beside it are buttons too: TP 8 x PP 2 keeps 31 + 30 layers
    # per stage (vLLM's split), the cache of the larger stage per GPU
    pipeline = by_layout[(8, 2, 1)]
    assert pipeline["kv_bytes_per_token"]["bf16"] == 31 * 576 * 2
    i32 = data["deploy"]["contexts"].index(32768)
    for option, layout in (
        (opening, ["--dp-attention", "16"]),
        (pipeline, ["--tp", "8", "--pp", "2"]),
    ):
        cap = run_json("capacity", "deepseek-v3", "--gpu", "h100", *layout, "--ctx", "32k")
        assert option["max_users"]["bf16"][i32] == cap["max_concurrency"]
    assert opening["max_users"]["bf16"][i32] > 3 * pipeline["max_users"]["bf16"][i32]


def test_overflow_amounts_are_the_bytes_past_the_wall():
    data = explore_json("llama-3.1-70b", "h100")
    deploy = data["deploy"]
    option = deploy["gpus"][0]["options"][2]  # TP 4
    ci, ui = deploy["contexts"].index(131072), deploy["users"].index(96)
    cache = 96 * 128 * 1024 * l70_bytes_per_token(4)  # 960 GiB
    assert option["cache_bytes"][ci][ui] == cache == 960 * GIB
    past = option["weights_bytes"] + option["reserve_bytes"] + cache - option["usable_bytes"]
    assert -option["spare_bytes"][ci][ui] == pytest.approx(past, abs=1)
    fits = deploy["users"].index(option["max_users_model_dtype"][ci])
    assert option["spare_bytes"][ci][fits] >= 0 > option["spare_bytes"][ci][fits + 1]


def test_quiz_answers_are_kvplans_numbers():
    data = explore_json("llama-3.1-70b", "h100")
    quiz = {q["id"]: q for q in data["quiz"]}
    assert [q["id"] for q in data["quiz"]] == [
        "why-cache",
        "sequence-bytes",
        "what-caps",
        "fp8-users",
    ]
    for q in data["quiz"]:
        assert sum(c["correct"] for c in q["choices"]) == 1
    seq = {c["key"]: c["value"] for c in quiz["sequence-bytes"]["choices"]}
    assert seq["correct"] == 32768 * 320 * KIB == 10 * GIB
    assert seq["multi-head"] == 64 / 8 * seq["correct"]  # one KV head per query head
    assert seq["per-token"] == 320 * KIB and seq["weights"] == L70_WEIGHTS_BYTES
    users = {c["key"]: c["value"] for c in quiz["fp8-users"]["choices"]}
    cap = run_json("capacity", "llama-3.1-70b", "--gpu", "h100", "--tp", "4", "--ctx", "128k")
    expected = {
        r["kv_dtype"]: r["max_concurrency"] for r in cap["what_if"] if r["kind"] == "kv_dtype"
    }
    assert users == {"bf16": expected["bf16"], "fp8": expected["fp8"], "int4": expected["int4"]}
    assert quiz["what-caps"]["values"]["max_users"] == cap["max_concurrency"]


def test_json_to_standard_output_and_the_page_to_its_default_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("explore", "llama-3.1-8b", "--gpu", "h100", "--format", "json")
    assert code == 0 and json.loads(out)["model"]["name"] == "llama-3.1-8b", err
    assert not list(tmp_path.iterdir())
    code, _, err = run_cli("explore", "llama-3.1-8b", "--gpu", "h100")
    assert code == 0 and (tmp_path / "kvcache.html").read_text().startswith("<!doctype html>")


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["explore", "llama-3.1-7b"], "did you mean"),
        (["explore", "llama-3.1-8b", "--gpu", "h1000"], "unknown GPU"),
        (["explore", "llama-3.1-8b", "--format", "pdf"], "pdf"),
    ],
)
def test_bad_input(argv, needle, tmp_path):
    code, _, err = run_cli(*argv, "--out", str(tmp_path / "x.html"))
    assert code == 2 and needle in err
    assert err.startswith("error:") or "Usage" in err


# ---- the page in a browser -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser(tmp_path_factory):
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
        "--hide-scrollbars",
        "--window-size=1280,900",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # chromium's profile and its singleton-socket folder (TMPDIR/org.chromium.Chromium.*, left
    # behind by every run) both inside pytest's own temporary folder
    scratch = tmp_path_factory.mktemp("chromium")
    options.add_argument(f"--user-data-dir={scratch / 'profile'}")
    service = Service(DRIVER, env={**os.environ, "TMPDIR": str(scratch)})
    driver = webdriver.Chrome(service=service, options=options)
    yield driver
    driver.quit()


def open_page(driver, page, width: int = 1280, height: int = 900) -> None:
    """Load `page` in a viewport `width` CSS pixels wide (a phone below 600)."""
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600},
    )
    driver.get(page.as_uri())
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors


UNITS = {"GiB": GIB, "MiB": 2**20, "KiB": KIB, "B": 1}


def shows_bytes(shown: str, expected: float) -> bool:
    """The displayed figure equals `expected` to its printed precision (JS and Python round a
    half differently)."""
    value, unit = shown.replace(",", "").split()
    digits = len(value.split(".")[1]) if "." in value else 0
    return abs(float(value) * UNITS[unit] - expected) <= 0.51 * 10**-digits * UNITS[unit]


def bytes_text(num_bytes: float) -> str:
    from kvplan.present.format import bytes_text as fmt

    return fmt(num_bytes)


def set_range(driver, element_id: str, index: int) -> None:
    driver.execute_script(
        "const e = document.getElementById(arguments[0]); e.value = arguments[1];"
        "e.dispatchEvent(new Event('input'));",
        element_id,
        index,
    )


def choose_gpu(driver, index: int) -> None:
    driver.execute_script(
        "const s = document.getElementById('a3-gpu'); s.value = arguments[0];"
        "s.dispatchEvent(new Event('change'));",
        index,
    )


def text(driver, element_id: str) -> str:
    return driver.find_element("id", element_id).text


def js(driver, expression: str):
    return driver.execute_script("return " + expression)


def shot(driver, name: str, section: str, width: int) -> None:
    """A screenshot of one whole section: the viewport is made tall enough to hold it."""
    ARTIFACTS.mkdir(exist_ok=True)
    element = driver.find_element("id", section)
    metrics = {"width": width, "deviceScaleFactor": 1, "mobile": width < 600}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {**metrics, "height": 900})
    height = js(driver, f"Math.ceil(document.getElementById('{section}').offsetHeight)")
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {**metrics, "height": height + 60})
    driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", element)
    element.screenshot(str(ARTIFACTS / f"explore-{name}-{section}-{width}.png"))
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {**metrics, "height": 900})


def no_horizontal_scroll(driver) -> bool:
    return js(
        driver, "document.documentElement.scrollWidth <= document.documentElement.clientWidth"
    )


@pytest.mark.parametrize("model", ["llama-3.1-8b", "deepseek-v3", "gemma-3-27b"])
def test_every_act_shows_kvplans_numbers(browser, model, tmp_path):
    page = page_of(model, tmp_path)
    open_page(browser, page)

    # the hook: bytes per token and one long conversation, as kvplan size prints them
    long_ctx = js(browser, "D.deploy.long_context")
    size = run_json("size", model, "--ctx", str(long_ctx))["rows"][0]
    assert shows_bytes(text(browser, "hook-per-seq"), size["kv_bytes_per_sequence"])
    assert bytes_text(size["kv_bytes_per_sequence"]) in text(browser, "hook-text")

    # Act 1: a 1,000-token prompt, then three generated tokens
    set_range(browser, "a1-prompt", 1000)
    for _ in range(3):
        browser.find_element("id", "a1-generate").click()
    assert text(browser, "a1-tokens") == "1,003"
    expected = run_json("size", model, "--ctx", "1003")["rows"][0]["kv_bytes_per_sequence"]
    assert js(browser, "D.act1.bytes[1003]") == expected
    assert shows_bytes(text(browser, "a1-bytes"), expected)
    assert bytes_text(expected) in text(browser, "a1-takeaway")
    blocks = js(browser, "document.querySelectorAll('#a1-strips .strip')[0].children.length")
    assert blocks == -(-1003 // 16)  # one square per 16-token block
    freed = "document.querySelectorAll('#a1-strips .blk.gone').length"
    assert js(browser, freed) == 0
    if model == "gemma-3-27b":  # past 1,024 tokens the sliding layers free whole old blocks
        set_range(browser, "a1-prompt", 1500)
        assert js(browser, freed) == (1500 - 1024) // 16

    # Act 2: KV heads, or the MLA latent
    if model == "deepseek-v3":
        assert not browser.find_element("id", "a2-heads").is_displayed()
        assert "latent of 576 values" in text(browser, "a2-intro")
        assert js(browser, "document.querySelectorAll('#a2-diagram .qh').length") == 128
    else:
        options = js(browser, "D.act2.options.map(o => o.kv_heads)")
        set_range(browser, "a2-heads", 0)  # one KV head: MQA
        assert options[0] == 1 and text(browser, "a2-kind").startswith("MQA")
        query_heads = js(browser, "D.act2.query_heads")
        assert js(browser, "document.querySelectorAll('#a2-diagram .grp').length") == 1
        assert js(browser, "document.querySelectorAll('#a2-diagram .qh').length") == query_heads
        if model == "llama-3.1-8b":  # full-attention stack: exactly H_q / 1
            assert text(browser, "a2-reduction") == f"{query_heads:.2f}×"
        set_range(browser, "a2-heads", len(options) - 1)  # every query head its own KV head
        assert text(browser, "a2-kind").startswith("MHA")
        assert text(browser, "a2-reduction") == "1.00×"
        assert js(browser, "document.querySelectorAll('#a2-diagram .grp').length") == query_heads
        set_range(browser, "a2-heads", 0)
        what = run_json("whatif", model, "--ctx", "8192", "--apply", "mqa")
        mqa = next(r for r in what["rows"] if r["technique"] == "mqa")
        assert js(browser, "D.act2.options[0].bytes_per_sequence") == mqa["kv_bytes"]
        assert shows_bytes(text(browser, "a2-per-seq"), mqa["kv_bytes"])

    # Act 3: the H200, its opening deployment, 32k context, 4 users
    choose_gpu(browser, 1)
    set_range(browser, "a3-ctx", js(browser, "D.deploy.contexts").index(32768))
    set_range(browser, "a3-users", js(browser, "D.deploy.users").index(4))
    tp, pp, dp = js(
        browser,
        "(o => [o.tp, o.pp, o.dp_attention])(D.deploy.gpus[1].options[D.deploy.gpus[1].chosen])",
    )
    layout = ["--dp-attention", str(dp)] if dp > 1 else ["--tp", str(tp), "--pp", str(pp)]
    cap = run_json("capacity", model, "--gpu", "h200", *layout, "--ctx", "32k", expect=FITS_OR_NOT)
    assert text(browser, "a3-max") == f"{cap['max_concurrency']:,}"
    if pp == 1 and dp == 1:  # kvplan size has no pipeline stages nor DP attention
        per_gpu = run_json("size", model, "--ctx", "32k", "--batch", "4", "--tp", str(tp))
        demand = per_gpu["rows"][0]["kv_bytes_total"]
        if model == "gemma-3-27b":  # paged: a 1,024 window can start mid-block, 65 blocks held
            demand += 4 * 52 * 16 * (2 * 16 * 128 * 2) // tp  # per sequence, 52 sliding layers
        assert shows_bytes(text(browser, "a3-demand"), demand)
    assert text(browser, "a3-status") == ("overflow" if 4 > cap["max_concurrency"] else "fits")
    assert bytes_text(cap["weights_bytes_per_gpu"]) in text(browser, "a3-gpu-note")

    # Act 4: fp8 and int4 at 32k on the same deployment
    set_range(browser, "a4-ctx", js(browser, "D.deploy.contexts").index(32768))
    for dtype in ("fp8", "int4"):
        browser.find_element("id", f"a4-{dtype}").click()
        row = next(r for r in cap["what_if"] if r["kind"] == "kv_dtype" and r["kv_dtype"] == dtype)
        assert text(browser, "a4-users") == f"{row['max_concurrency']:,}"
        assert f"{row['max_concurrency']:,}" in text(browser, "a4-takeaway")
    assert text(browser, "a4-quality") == "lossy"

    # every act has its takeaway; the why cards and the notes are filled in
    for act in (1, 2, 3, 4):
        assert len(text(browser, f"a{act}-takeaway")) > 80
    for card in ("why-exists-text", "why-trade-text", "why-formula-terms", "why-serving-text"):
        assert text(browser, card)
    assert "Capacity:" in text(browser, "notes")


def test_gpu_count_buttons_change_the_per_gpu_numbers(browser, tmp_path):
    page = page_of("llama-3.1-70b", tmp_path, "h100")
    open_page(browser, page)
    # it opens on TP 4 (one 128k conversation fits) and Act 4 opens at 128k, fp8
    assert "on" in browser.find_element("id", "a3-opt-2").get_attribute("class")
    assert text(browser, "a3-status") == "fits"
    cap128 = run_json("capacity", "llama-3.1-70b", "--gpu", "h100", "--tp", "4", "--ctx", "128k")
    fp8 = next(r for r in cap128["what_if"] if r["kv_dtype"] == "fp8")["max_concurrency"]
    assert text(browser, "a4-users") == str(fp8) and fp8 >= 1
    assert "128k" in text(browser, "a4-users-label")
    assert "TP 2" not in text(browser, "a3-why") and "On 2 GPUs" in text(browser, "a3-why")
    set_range(browser, "a3-ctx", js(browser, "D.deploy.contexts").index(32768))
    for index, tp in enumerate((1, 2, 4, 8)):
        browser.find_element("id", f"a3-opt-{index}").click()
        cap = run_json(
            "capacity", "llama-3.1-70b", "--gpu", "h100", "--tp", str(tp), "--ctx", "32k",
            expect=FITS_OR_NOT,
        )  # fmt: skip
        note = text(browser, "a3-gpu-note")
        assert bytes_text(cap["weights_bytes_per_gpu"]) in note
        assert bytes_text(cap["usable_bytes_per_gpu"]) in note
        assert text(browser, "a3-max") == f"{cap['max_concurrency']:,}"
        users = js(browser, "D.deploy.users[Number(document.getElementById('a3-users').value)]")
        assert shows_bytes(text(browser, "a3-demand"), users * 32768 * l70_bytes_per_token(tp))
        if tp > 1:
            assert f"holds {L70_KV_HEADS // tp} of the 8 KV heads" in text(browser, "a3-why")


def test_overflow_draws_the_wall_and_says_by_how_much(browser, tmp_path):
    page = page_of("llama-3.1-70b", tmp_path, "h100")
    open_page(browser, page)
    left = "getComputedStyle(document.getElementById('a3-wall')).left"
    width = "document.getElementById('a3-seg-w').getBoundingClientRect().width"
    wall_at, weights_width = js(browser, left), js(browser, width)
    assert js(browser, "document.getElementById('a3-seg-over').getBoundingClientRect().width") == 0

    # 96 users at 128k on TP 4: 960 GiB of cache against a ~36 GiB pool
    set_range(browser, "a3-ctx", js(browser, "D.deploy.contexts").index(131072))
    set_range(browser, "a3-users", js(browser, "D.deploy.users").index(96))
    cap = run_json("capacity", "llama-3.1-70b", "--gpu", "h100", "--tp", "4", "--ctx", "128k")
    past = 960 * GIB - cap["kv_pool_bytes_per_gpu"]
    assert text(browser, "a3-status") == "overflow"
    assert browser.find_element("id", "a3-wall").is_displayed()
    assert js(browser, left) == wall_at  # the wall stays put
    assert js(browser, width) == pytest.approx(weights_width)  # the weights do not shrink
    over = js(browser, "document.getElementById('a3-seg-over').getBoundingClientRect()")
    wall = js(browser, "document.getElementById('a3-wall').getBoundingClientRect()")
    assert over["width"] > 0 and over["left"] >= wall["left"] - 1
    style = "getComputedStyle(document.getElementById('a3-seg-{}')).backgroundImage"
    assert "gradient" in js(browser, style.format("over"))  # hatched red, not the cache's colour
    assert js(browser, style.format("kv")) == "none"
    assert bytes_text(past) in text(browser, "a3-verdict")
    assert bytes_text(past) + " past the wall" in text(browser, "a3-over-label")
    assert f"At most {cap['max_concurrency']} users fit" in text(browser, "a3-verdict")
    shot(browser, "llama-3.1-70b-overflow", "act3", 1280)
    shot(browser, "llama-3.1-70b-overflow", "act3", 400)

    # one GPU: the weights alone pass the wall
    browser.find_element("id", "a3-opt-0").click()
    cap1 = run_json(
        "capacity", "llama-3.1-70b", "--gpu", "h100", "--tp", "1", "--ctx", "128k", expect=1
    )
    assert bytes_text(-cap1["kv_pool_bytes_per_gpu"]) in text(browser, "a3-verdict")
    assert "before a single token is cached" in text(browser, "a3-verdict")


def test_a_model_no_layout_holds_opens_on_the_largest_and_overflows(browser, tmp_path):
    # 4 layers of hidden 65,536 and MLP 524,288: 840 GiB of bf16 weights, 26 GiB per GPU even on
    # 32 RTX 4090s (TP 8 x PP 4, the most 4 layers allow), over their 21.6 GiB usable each
    config = tmp_path / "config.json"
    fat = llama_like(
        hidden_size=65536,
        intermediate_size=524288,
        num_attention_heads=512,
        num_key_value_heads=8,
        num_hidden_layers=4,
    )
    config.write_text(json.dumps(fat))
    data = explore_json(str(config), "rtx-4090")
    gpu = data["deploy"]["gpus"][0]
    assert [(o["tp"], o["pp"]) for o in gpu["options"]][-1] == (8, 1)  # the largest in a node
    assert gpu["reason"] == "none-fits" and gpu["chosen"] == len(gpu["options"]) - 1
    largest = gpu["options"][-1]
    assert largest["pool_bytes"] < 0 and max(largest["max_users_model_dtype"]) == 0
    page = tmp_path / "fat.html"
    code, _, err = run_cli("explore", str(config), "--gpu", "rtx-4090", "--out", str(page))
    assert code == 0, err
    open_page(browser, page)
    assert text(browser, "a3-status") == "overflow"
    assert "cannot hold" in text(browser, "a3-why")
    assert bytes_text(-largest["pool_bytes"]) in text(browser, "a3-verdict")
    assert "more GPUs than these buttons offer" in text(browser, "a3-verdict")


def test_quiz_answers_are_checkable(browser, tmp_path):
    page = page_of("llama-3.1-70b", tmp_path, "h100")
    open_page(browser, page)
    questions = js(browser, "D.quiz")
    for q in questions:
        wrong = next(c for c in q["choices"] if not c["correct"])
        right = next(c for c in q["choices"] if c["correct"])
        browser.find_element("id", f"quiz-{q['id']}-{wrong['key']}").click()
        assert text(browser, f"quiz-{q['id']}-feedback").startswith("Not quite.")
        browser.find_element("id", f"quiz-{q['id']}-{right['key']}").click()
        assert text(browser, f"quiz-{q['id']}-feedback").startswith("Right.")
    assert text(browser, "quiz-score") == "First tries right: 0 of 4 answered."
    # the right answers are kvplan's numbers, shown as kvplan formats them
    assert text(browser, "quiz-sequence-bytes-correct") == "10.00 GiB"  # 320 KiB x 32,768
    cap = run_json("capacity", "llama-3.1-70b", "--gpu", "h100", "--tp", "4", "--ctx", "128k")
    fp8 = next(r for r in cap["what_if"] if r["kv_dtype"] == "fp8")["max_concurrency"]
    assert text(browser, "quiz-fp8-users-fp8") == str(fp8)
    browser.find_element("id", "quiz-all").click()
    assert len(browser.find_elements("css selector", "#quiz-answers li")) == 4
    shot(browser, "llama-3.1-70b-answered", "quiz", 1280)
    shot(browser, "llama-3.1-70b-answered", "quiz", 400)


@pytest.mark.slow  # a browser page per model, screenshots at three widths (CI keeps them)
@pytest.mark.parametrize("model", ["llama-3.1-70b", "deepseek-v3", "gemma-3-27b"])
def test_screenshots_and_no_horizontal_scroll_at_400_px(browser, model, tmp_path):
    page = page_of(model, tmp_path)
    for width in (1280, 400):
        open_page(browser, page, width)
        assert no_horizontal_scroll(browser)
        if model == "gemma-3-27b":  # past the window: freed blocks in the strip
            set_range(browser, "a1-prompt", 1500)
        for _ in range(3):  # generated tokens in the strip
            browser.find_element("id", "a1-generate16").click()
        for section in SECTIONS:
            shot(browser, model, section, width)
        # the widest state: a long prompt, the largest deployment, overflowing, every answer shown
        set_range(browser, "a1-prompt", js(browser, "D.act1.prompt_max"))
        browser.find_element("id", "a1-generate16").click()
        options = js(browser, "D.deploy.gpus[0].options.length")
        browser.find_element("id", f"a3-opt-{options - 1}").click()
        set_range(browser, "a3-users", len(js(browser, "D.deploy.users")) - 1)
        set_range(browser, "a3-ctx", len(js(browser, "D.deploy.contexts")) - 1)
        browser.find_element("id", "quiz-all").click()
        assert text(browser, "a3-status") == "overflow"
        assert no_horizontal_scroll(browser)
