"""Fifth hostile campaign: hangs, unbounded memory and a poisoned cache. Every bound is checked
before the work it bounds (a trace's span, a trace file's kind and size, a GGUF's counts, the
safetensors headers' total), every network exchange has one deadline over all of it, and the
Hub's answers are cached only once they validate. Each failure is one `error:` line, exit 2."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler

import pytest

from helpers import REPO, one_line_error, run_cli, run_json, serve_locally


# ---- traces: the span is no allocation, the file is a regular file of bounded size -----------
def test_a_trace_spanning_1e9_seconds_is_simulated_in_bounded_memory(tmp_path):
    """An arrival at 1e9 s (the documented maximum) binned the output tokens per second of the
    span: a 7.45 GiB array and an internal MemoryError. Now binned per occupied second."""
    import resource

    trace = tmp_path / "far.jsonl"
    trace.write_text(
        '{"arrival_s": 0, "input_tokens": 100, "output_tokens": 10}\n'
        '{"arrival_s": 1e9, "input_tokens": 100, "output_tokens": 10}\n'
    )
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    bench = run_json("simulate", "qwen3-8b", "--trace", str(trace))["runs"][0]["bench"]
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert bench["completed"] == 2 and bench["max_output_tokens_per_s"] == 10
    assert grown_kib < 512 * 1024, grown_kib  # was 7.45 GiB


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "/dev/urandom", "too_large"])
def test_a_trace_that_is_no_regular_file_or_too_large_is_refused_unread(tmp_path, kind):
    """A FIFO blocked the read forever, /dev/urandom never ended, /dev/zero grew without bound."""
    if kind == "fifo":
        path = str(tmp_path / "trace.jsonl")
        os.mkfifo(path)
    elif kind == "too_large":
        path = str(tmp_path / "huge.jsonl")
        with open(path, "wb") as handle:
            handle.truncate(64 * 2**20 + 1)  # sparse: no disk used
    else:
        path = kind
    started = time.monotonic()
    code, _, err = run_cli("simulate", "qwen3-8b", "--trace", path)
    needle = "over 64 MiB" if kind == "too_large" else "not a regular file"
    one_line_error(code, err, needle)
    assert time.monotonic() - started < 10


# ---- GGUF: counts and sizes bounded before the reader walks them -----------------------------
def _s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _u32(key: str, value: int) -> bytes:
    return _s(key) + struct.pack("<II", 4, value)


def _tensor(name: str, dims: list[int], n_dims: int | None = None) -> bytes:
    count = len(dims) if n_dims is None else n_dims
    return _s(name) + struct.pack(f"<I{len(dims)}QIQ", count, *dims, 1, 0)  # f16, offset 0


def _gguf(tmp_path, kvs: list[bytes], tensors: list[bytes], tensor_count=None, name="m.gguf"):
    base = [
        _s("general.architecture") + struct.pack("<I", 8) + _s("llama"),
        _u32("llama.block_count", 2),
        _u32("llama.embedding_length", 64),
        _u32("llama.attention.head_count", 4),
        _u32("llama.attention.head_count_kv", 4),
    ]
    kvs = base + kvs
    count = len(tensors) if tensor_count is None else tensor_count
    head = b"GGUF" + struct.pack("<IQQ", 3, count, len(kvs))
    path = tmp_path / name
    path.write_bytes(head + b"".join(kvs) + b"".join(tensors) + b"\0" * 64)
    return str(path)


EMBED = [_tensor("token_embd.weight", [64, 1000])]


def _array(key: str, item_type: int, count: int, body: bytes = b"") -> bytes:
    return _s(key) + struct.pack("<IIQ", 9, item_type, count) + body


@pytest.mark.parametrize(
    "kvs, tensors, tensor_count, needle",
    [
        # 8M nested empty arrays (96 MB) took over 200 s and 8.2 GB; llama.cpp reads none
        ([_array("x.nested", 9, 1000, struct.pack("<IQ", 4, 0) * 1000)], EMBED, None,
         "array of arrays"),
        # a string array of 2^40: struct.error, an internal error; 30M empty ones: 6 s, 270 MB
        ([_array("tokenizer.ggml.tokens", 8, 2**40)], EMBED, None, "array length"),
        ([_array("tokenizer.ggml.tokens", 8, 2**24 + 1)], EMBED, None, "16,777,216"),
        ([_array("llama.x", 4, 2**40)], EMBED, None, "array length"),
        ([_array("llama.x", 4, 1000)], EMBED, None, "runs past its end"),
        # dims: 2.7e39 GiB of weights printed
        ([], [_tensor("token_embd.weight", [2**40] * 4)], None, "over 1,099,511,627,776 elements"),
        ([], [_tensor("token_embd.weight", [], n_dims=2**31)], None, "tensor dimensions"),
        ([], EMBED, 2**62, "tensor count"),
        # a vocabulary of 2^40 was taken as stated
        ([_s("llama.vocab_size") + struct.pack("<IQ", 10, 2**40)], EMBED, None,
         "llama.vocab_size"),
        ([], [_tensor("token_embd.weight", [64, 2**30])], None, "vocabulary of 1,073,741,824"),
    ],
)  # fmt: skip
def test_hostile_gguf_counts_are_refused_before_reading(
    tmp_path, kvs, tensors, tensor_count, needle
):
    started = time.monotonic()
    code, _, err = run_cli("size", _gguf(tmp_path, kvs, tensors, tensor_count))
    one_line_error(code, err, needle)
    assert time.monotonic() - started < 10


def test_a_vocabulary_sized_number_array_is_read_as_its_length(tmp_path):
    """2^24 tokenizer scores were made Python floats one by one: 52 s and 760 MB (2^23 here:
    half that). kvplan reads no array longer than one value per layer: now 1.4 s and 37 MB."""
    scores = _array("tokenizer.ggml.scores", 6, 2**23, b"\0" * 4 * 2**23)  # f32
    started = time.monotonic()
    data = run_json("size", _gguf(tmp_path, [scores], EMBED))
    assert data["model"]["weights_bytes"] == 64 * 1000 * 2
    assert time.monotonic() - started < 10
    code, _, err = run_cli(
        "size",
        _gguf(tmp_path, [_array("llama.feed_forward_length", 4, 5000, b"\0" * 20_000)], EMBED),
    )
    one_line_error(code, err, "more than one per layer")


def test_a_split_gguf_bounds_its_tensors_over_every_shard(tmp_path, monkeypatch):
    import kvplan.inputs.gguf as gguf_input

    monkeypatch.setattr(gguf_input, "MAX_GGUF_TENSORS", 1)  # each shard holds one
    first = _gguf(tmp_path, [], EMBED, name="m-00001-of-00002.gguf")
    _gguf(tmp_path, [], [_tensor("output.weight", [64, 1000])], name="m-00002-of-00002.gguf")
    code, _, err = run_cli("size", first)
    one_line_error(code, err, "more than 1 tensors over its shards")


def test_a_gguf_built_by_hand_reads(tmp_path):
    """The hand-built file of the cases above is itself a readable model."""
    data = run_json("size", _gguf(tmp_path, [], EMBED))
    assert data["model"]["weights_bytes"] == 64 * 1000 * 2


# ---- safetensors: the totals over every shard bounded before the next header -----------------
def _shard_claiming(length: int) -> bytes:
    return struct.pack("<Q", length) + b"{}"  # the length alone is read before the total


def _header_of(tensors: dict) -> bytes:
    raw = json.dumps(tensors).encode()
    return struct.pack("<Q", len(raw)) + raw


def test_safetensors_headers_past_the_total_cap_are_refused_before_any_is_read(tmp_path):
    """Three 64 MB headers were each read and parsed before the 2M-tensor limit was checked:
    past 120 s and 1.6 GB. Now their lengths are summed first (128 MiB at most in all)."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(CONFIG)
    for i in range(3):
        (folder / f"s{i}.safetensors").write_bytes(_shard_claiming(60 * 2**20))
    started = time.monotonic()
    code, _, err = run_cli("size", str(folder))
    one_line_error(code, err, "over kvplan's cap of 128 MiB")
    assert time.monotonic() - started < 10


def test_the_tensor_count_is_checked_before_the_next_header_is_parsed(tmp_path, monkeypatch):
    import kvplan.inputs.checkpoint as checkpoint

    monkeypatch.setattr(checkpoint, "MAX_TENSORS", 3)
    parsed: list[str] = []
    parse = checkpoint.parse_header
    monkeypatch.setattr(
        checkpoint, "parse_header", lambda raw, src: parsed.append(src) or parse(raw, src)
    )
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(CONFIG)
    for i in range(3):
        tensors = {
            f"t{i}.{j}": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]} for j in range(2)
        }
        (folder / f"s{i}.safetensors").write_bytes(_header_of(tensors))
    code, _, err = run_cli("size", str(folder))
    one_line_error(code, err, "more than 3 tensors")
    assert len(parsed) == 2  # the third shard's header was never parsed


# ---- the Hub: one deadline over each whole exchange; only what validated is cached -----------
CONFIG = (REPO / "model_configs" / "Llama-3.1-8B.json").read_text()
HEADER = _header_of({"model.embed_tokens.weight": {"dtype": "BF16", "shape": [128256, 4096],
                                                    "data_offsets": [0, 1]}})  # fmt: skip


class Hub:
    mode = "ok"
    ranges: list = []


class HubHandler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _drip(self, data: bytes, every_s: float) -> None:
        for byte in data:
            try:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
            except OSError:
                return
            time.sleep(every_s)

    def do_GET(self):  # noqa: N802 - the stdlib's name
        mode, path = Hub.mode, self.path
        if path.endswith("config.json"):
            body = b"<html>sign in to the proxy</html>" if mode == "login_page" else CONFIG.encode()
            return self._send(200, body)
        if path.endswith(".index.json"):
            if mode == "four_big_shards":
                shards = {f"t{i}": f"model-{i}.safetensors" for i in range(4)}
                return self._send(200, json.dumps({"weight_map": shards}).encode())
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.end_headers()
            return None
        Hub.ranges.append(self.headers.get("Range"))
        if mode == "slow_headers":  # the status line, then a header line every 0.3 s, forever
            self.wfile.write(b"HTTP/1.1 206 Partial Content\r\n")
            return self._drip(b"X-Slow: " + b"a" * 10_000, 0.3)
        if mode == "trickle_body":  # the headers at once, then the body a byte a second
            self.send_response(206)
            self.send_header("Content-Length", "8")
            self.end_headers()
            return self._drip(struct.pack("<Q", len(HEADER) - 8), 1.0)
        if mode == "four_big_shards":
            return self._send(206, struct.pack("<Q", 60 * 2**20))
        start, end = (int(x) for x in self.headers["Range"].split("=")[1].split("-"))
        return self._send(206, HEADER[start : end + 1])


@pytest.fixture(scope="module")
def hub():
    yield from serve_locally(HubHandler)


def kvplan_against(hub_url: str, tmp_path, *argv: str) -> tuple[subprocess.CompletedProcess, float]:
    env = dict(
        os.environ,
        HF_ENDPOINT=hub_url,
        HF_HOME=str(tmp_path / "hf"),
        KVPLAN_CACHE=str(tmp_path / "kv"),
        KVPLAN_HUB_TIMEOUT="2",
    )
    env.pop("HF_HUB_OFFLINE", None)
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "kvplan", *argv], capture_output=True, text=True, env=env, timeout=60
    )
    return proc, time.monotonic() - started


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["slow_headers", "trickle_body"])
def test_a_slow_safetensors_answer_ends_at_the_deadline_and_the_process_exits(hub, tmp_path, mode):
    """Response headers sent a line at a time kept the answer's process alive 52 s past a 2 s
    deadline (each line came within the socket timeout; a pool thread held the exit); a body
    trickled a byte a second, 4.3 s. Now the deadline shuts the exchange's sockets: ~2.5 s."""
    Hub.mode = mode
    proc, elapsed = kvplan_against(hub, tmp_path, "size", f"someorg/{mode}")
    assert proc.returncode == 0, proc.stderr
    assert "safetensors headers could not be read" in " ".join(proc.stdout.split())
    assert elapsed < 8, elapsed


def test_hub_headers_past_the_total_cap_are_refused_before_any_download(hub, tmp_path):
    """Four 60 MB headers were downloaded and parsed (82 s, 3.6 GB) before the bound."""
    Hub.mode, Hub.ranges = "four_big_shards", []
    proc, _ = kvplan_against(hub, tmp_path, "size", "someorg/big")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "over kvplan's cap of 128 MiB" in proc.stderr and "Traceback" not in proc.stderr
    assert Hub.ranges == ["bytes=0-7"] * 4  # the lengths only


def test_a_login_page_from_the_hub_is_not_cached_and_a_bad_entry_is_refetched(hub, tmp_path):
    """A proxy's HTML page (status 200) was cached before it was parsed: every later run said
    "invalid JSON", the Hub fixed or not."""
    Hub.mode = "login_page"
    proc, _ = kvplan_against(hub, tmp_path, "size", "someorg/m")
    assert proc.returncode == 2 and "invalid JSON" in proc.stderr, proc.stderr
    cached = tmp_path / "kv" / "configs" / "someorg--m" / "config.json"
    assert not cached.exists()
    Hub.mode = "ok"
    proc, _ = kvplan_against(hub, tmp_path, "size", "someorg/m")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(cached.read_text()) == json.loads(CONFIG)
    cached.write_text("<html>a page an older kvplan saved</html>")
    proc, _ = kvplan_against(hub, tmp_path, "size", "someorg/m")
    assert proc.returncode == 0, proc.stderr  # discarded and fetched again
    assert json.loads(cached.read_text()) == json.loads(CONFIG)


def test_a_corrupt_hugging_face_cache_entry_is_named_with_how_to_clear_it(hub, tmp_path):
    snapshot = tmp_path / "hf" / "hub" / "models--someorg--m" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("<html>")
    (tmp_path / "hf" / "hub" / "models--someorg--m" / "refs").mkdir()
    (tmp_path / "hf" / "hub" / "models--someorg--m" / "refs" / "main").write_text("abc")
    Hub.mode = "ok"
    proc, _ = kvplan_against(hub, tmp_path, "size", "someorg/m")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "invalid JSON" in proc.stderr and "delete it" in proc.stderr
    assert str(snapshot / "config.json") in proc.stderr
