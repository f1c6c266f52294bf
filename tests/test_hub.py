"""The Hub, against a stand-in on 127.0.0.1 (tests never need the network): config.json and
safetensors headers fetched within one deadline and a size cap, each failure one clear line; and
local checkpoint folders whose headers give the exact weight bytes."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from helpers import REPO, run_json

CONFIG = (REPO / "model_configs" / "Llama-3.1-8B.json").read_text()


def safetensors_header(tensors: dict[str, tuple[str, list[int]]]) -> bytes:
    """A safetensors header (8-byte length + JSON), with offsets, and no data."""
    header, offset = {}, 0
    sizes = {"BF16": 2, "F32": 4, "F8_E4M3": 1, "U8": 1, "I32": 4, "F16": 2}
    for name, (dtype, shape) in tensors.items():
        n = sizes[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw


SHARD = safetensors_header(
    {
        "model.embed_tokens.weight": ("BF16", [128256, 4096]),
        "model.layers.0.self_attn.q_proj.weight": ("F8_E4M3", [4096, 4096]),
        "model.layers.0.self_attn.q_proj.weight_scale_inv": ("F32", [32, 32]),
        "model.layers.40.mlp.up_proj.weight": ("BF16", [14336, 4096]),  # past 32 layers: MTP
        "vision_tower.blocks.0.attn.qkv.weight": ("BF16", [1024, 1024]),
    }
)


class Behaviour:
    mode = "ok"


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):  # noqa: N802 - the stdlib's name
        mode = Behaviour.mode
        if mode == "hang":
            time.sleep(30)
            return
        if mode == "trickle":
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            for _ in range(30):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(1)
            return
        if mode == "headers_only":
            self.send_response(200)
            self.send_header("Content-Length", "5000")
            self.end_headers()
            self.wfile.flush()
            time.sleep(30)
            return
        if mode == "error500":
            self.send_error(500)
            return
        if mode == "gated":
            self.send_response(403)
            self.send_header("X-Error-Code", "GatedRepo")
            self.end_headers()
            return
        if mode == "missing":
            self.send_response(404)
            self.send_header("X-Error-Code", "RepoNotFound")
            self.end_headers()
            return
        if mode == "loop":
            self.send_response(302)
            self.send_header("Location", self.path)
            self.end_headers()
            return
        if mode == "huge":
            self.send_response(200)
            self.send_header("Content-Length", str(300 * 2**20))
            self.end_headers()
            return
        if mode == "garbage":
            self.wfile.write(b"\x00\xffNOT HTTP AT ALL\r\n\r\n")
            return
        if mode == "not_json":
            body = b"<html>no</html>"
        elif self.path.endswith("config.json"):
            body = CONFIG.encode()
        elif self.path.endswith("model.safetensors.index.json"):
            body = json.dumps({"weight_map": {"a": "model-00001.safetensors"}}).encode()
        elif self.path.endswith(".safetensors"):
            ranges = self.headers.get("Range", "bytes=0-").split("=")[1].split("-")
            start, end = int(ranges[0]), int(ranges[1] or len(SHARD) - 1)
            body = SHARD[start : end + 1]
            self.send_response(206)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def hub():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def run_kvplan(hub_url: str, tmp_path, mode: str, *argv: str, timeout_s: str = "2"):
    """kvplan in a subprocess against the stand-in (the server's behaviour is `mode`)."""
    env = dict(
        os.environ,
        HF_ENDPOINT=hub_url,
        HF_HOME=str(tmp_path / "hf"),
        KVPLAN_CACHE=str(tmp_path / "kv"),
        KVPLAN_HUB_TIMEOUT=timeout_s,
    )
    env.pop("HF_HUB_OFFLINE", None)
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "kvplan", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    return proc, time.monotonic() - started


def test_config_and_safetensors_headers_from_the_hub(hub, tmp_path):
    Behaviour.mode = "ok"
    proc, _ = run_kvplan(hub, tmp_path, "ok", "size", "someorg/llama-like", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    embed = 128256 * 4096 * 2
    fp8 = 4096 * 4096 + 32 * 32 * 4
    assert data["model"]["weights_bytes"] == embed + fp8  # the headers' bytes, MTP and vision apart
    words = " ".join(n["text"] for n in data["notes"])
    assert "tensor headers" in words and "multi-token-prediction" in words
    assert "differs" not in words or "checkpoint holds" in words
    # the config was cached: a second call works with the Hub gone
    Behaviour.mode = "missing"
    proc, _ = run_kvplan(hub, tmp_path, "missing", "size", "someorg/llama-like")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    "mode,needle",
    [
        ("error500", "HTTP 500"),
        ("gated", "gated or private"),
        ("missing", "no such repository"),
        ("loop", "redirected more than"),
        ("huge", "too large"),
        ("garbage", "not valid HTTP"),
        ("not_json", "invalid JSON"),
    ],
)
def test_each_hub_failure_is_one_clear_line_fast(hub, tmp_path, mode, needle):
    Behaviour.mode = mode
    proc, elapsed = run_kvplan(hub, tmp_path, mode, "size", f"someorg/{mode}-model")
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert elapsed < 30  # bounded (the deadline is 2 s; the rest is start-up)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["hang", "trickle", "headers_only"])
def test_a_server_that_never_finishes_is_cut_at_the_deadline(hub, tmp_path, mode):
    Behaviour.mode = mode
    proc, elapsed = run_kvplan(hub, tmp_path, mode, "size", f"someorg/{mode}-model")
    assert proc.returncode == 2 and "did not answer within 2 s" in proc.stderr, proc.stderr
    assert elapsed < 20


def test_malformed_timeout_variable_is_a_clear_error(hub, tmp_path):
    Behaviour.mode = "ok"
    proc, _ = run_kvplan(hub, tmp_path, "ok", "size", "someorg/x", timeout_s="soon")
    assert proc.returncode == 2 and "KVPLAN_HUB_TIMEOUT" in proc.stderr


def test_https_to_a_plain_http_port_fails_fast(hub, tmp_path):
    https = hub.replace("http://", "https://")
    proc, elapsed = run_kvplan(https, tmp_path, "ok", "size", "someorg/tls-model")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert elapsed < 30


def test_local_checkpoint_folder_headers_are_the_weights(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(CONFIG)
    shard = safetensors_header(
        {
            "model.embed_tokens.weight": ("BF16", [128256, 4096]),
            "lm_head.weight": ("BF16", [128256, 4096]),
            "model.layers.0.mlp.down_proj.qweight": ("I32", [14336 // 8, 4096]),  # int4 packed
            "model.layers.0.mlp.down_proj.scales": ("F16", [14336 // 128, 4096]),
        }
    )
    (folder / "model.safetensors").write_bytes(shard)
    data = run_json("size", str(folder))
    expected = 2 * 128256 * 4096 * 2 + 14336 // 8 * 4096 * 4 + 14336 // 128 * 4096 * 2
    assert data["model"]["weights_bytes"] == expected
    words = " ".join(n["text"] for n in data["notes"])
    assert "checkpoint holds" in words  # far from the config's 8B bf16 count: both printed


@pytest.mark.parametrize(
    "payload,needle",
    [
        (struct.pack("<Q", 10**12), "implausible safetensors header"),
        (b"\x01", "too short"),
        (struct.pack("<Q", 20) + b"{not json at all!!!}", "not valid JSON"),
    ],
)
def test_malformed_safetensors_header_is_refused(tmp_path, payload, needle):
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "config.json").write_text(CONFIG)
    (folder / "model.safetensors").write_bytes(payload)
    from helpers import run_cli

    code, _, err = run_cli("size", str(folder))
    assert code == 2 and needle in err, err
