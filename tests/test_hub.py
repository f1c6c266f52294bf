"""The Hub, against a stand-in on 127.0.0.1 (tests never need the network): config.json and
safetensors headers fetched within one deadline and a size cap, each failure one clear line; and
local checkpoint folders whose headers give the exact weight bytes."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler

import pytest

from helpers import REPO, run_json, serve_locally

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
    seen_auth: list = []


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
        if mode == "to_file":  # a redirect off HTTP: never followed
            self.send_response(302)
            self.send_header("Location", "file:///etc/hostname")
            self.end_headers()
            return
        if mode == "to_other_host" and "other" not in self.path:
            Behaviour.seen_auth.append(("first", self.headers.get("Authorization")))
            self.send_response(302)
            host = "localhost" if "127.0.0.1" in self.headers.get("Host", "") else "127.0.0.1"
            self.send_header("Location", f"http://{host}:{self.server.server_address[1]}/other")
            self.end_headers()
            return
        if mode == "to_other_host":
            Behaviour.seen_auth.append(("other", self.headers.get("Authorization")))
            self.send_response(200)
            self.send_header("Content-Length", str(len(CONFIG)))
            self.end_headers()
            self.wfile.write(CONFIG.encode())
            return
        if mode == "drip_header" and self.path.endswith(".index.json"):  # one unsharded file
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.end_headers()
            return
        if mode == "drip_header" and self.path.endswith(".safetensors"):
            if self.headers.get("Range", "").startswith("bytes=0-"):  # the length comes at once
                body = struct.pack("<Q", 100_000)
                self.send_response(206)
                self.send_header("Content-Length", "8")
                self.end_headers()
                self.wfile.write(body)
                return
            self.send_response(206)  # then the header, one byte a second, for a day
            self.send_header("Content-Length", "100000")
            self.end_headers()
            for _ in range(100_000):
                try:
                    self.wfile.write(b" ")
                    self.wfile.flush()
                except OSError:
                    return
                time.sleep(1)
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
    yield from serve_locally(Handler)


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


# ---- third campaign: redirects, a trickled header, checkpoint folders -----------------------
def test_a_redirect_off_http_is_never_followed(hub, tmp_path):
    """A redirect to file:///etc/hostname used to be followed: a local file read as config."""
    Behaviour.mode = "to_file"
    proc, _ = run_kvplan(hub, tmp_path, "to_file", "size", "someorg/to-file")
    assert proc.returncode == 2 and "not http(s)" in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1


def test_the_token_is_not_sent_to_another_host(hub, tmp_path, monkeypatch):
    """A redirect to another host (a CDN, or a hostile one) used to carry the HF token along."""
    Behaviour.mode = "to_other_host"
    Behaviour.seen_auth = []
    monkeypatch.setenv("HF_TOKEN", "secret-token")
    proc, _ = run_kvplan(hub, tmp_path, "to_other_host", "size", "someorg/redirected")
    assert proc.returncode == 0, proc.stderr
    assert ("first", "Bearer secret-token") in Behaviour.seen_auth
    assert ("other", None) in Behaviour.seen_auth
    assert ("other", "Bearer secret-token") not in Behaviour.seen_auth


@pytest.mark.slow
def test_a_trickled_safetensors_header_ends_at_the_deadline(hub, tmp_path):
    """One byte a second of a 100 kB header kept the process alive past its deadline (a read
    of 64 kB waited for all of them; the pool's thread held the exit): killed at 60 s."""
    Behaviour.mode = "drip_header"
    proc, elapsed = run_kvplan(hub, tmp_path, "drip_header", "size", "someorg/drip")
    assert proc.returncode == 0, proc.stderr
    assert "safetensors headers could not be read" in " ".join(proc.stdout.split())
    assert elapsed < 20


def _checkpoint(tmp_path, files: dict) -> str:
    folder = tmp_path / "ckpt"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(CONFIG)
    for name, data in files.items():
        (folder / name).write_bytes(data if isinstance(data, bytes) else data.encode())
    return str(folder)


def _header(tensors: dict) -> bytes:
    raw = json.dumps(tensors).encode()
    return struct.pack("<Q", len(raw)) + raw


@pytest.mark.parametrize(
    "files, needle",
    [
        # a product of in-range sides: an OverflowError, or 2.6e27 GB printed
        ({"model.safetensors": _header({"w": {"dtype": "BF16", "shape": [2**39] * 30}})},
         "over 1,099,511,627,776 elements"),
        ({"model.safetensors": _header({"w": {"dtype": "BF16", "shape": [2**39] * 3}})},
         "over 1,099,511,627,776 elements"),
        ({"model.safetensors": _header({"w": {"dtype": "BF16", "shape": [True, 4]}})},
         "malformed shape"),
        # metadata alone priced the model at 0 bytes
        ({"model.safetensors": _header({"__metadata__": {"format": "pt"}})}, "list no tensors"),
        # index entries that are no file name of the folder (a NUL, a long name crashed)
        ({"model.safetensors.index.json": json.dumps({"weight_map": {"a": "../../etc/passwd"}})},
         "is not a file name"),
        ({"model.safetensors.index.json": json.dumps({"weight_map": {"a": "x\u0000.st"}})},
         "is not a file name"),
        ({"model.safetensors.index.json": json.dumps({"weight_map": {"a": "x" * 5000}})},
         "is missing from"),
    ],
)  # fmt: skip
def test_hostile_checkpoint_folders_are_one_line_errors(tmp_path, files, needle):
    from helpers import run_cli

    code, _, err = run_cli("size", _checkpoint(tmp_path, files))
    assert code == 2 and needle in err and err.count("\n") == 1, err


def test_a_fifo_or_a_symlink_loop_among_the_shards_is_refused(tmp_path):
    """A FIFO named model.safetensors blocked the read forever; a looping link in the index
    was an internal RuntimeError."""
    from helpers import run_cli

    folder = _checkpoint(tmp_path, {})
    os.mkfifo(os.path.join(folder, "model.safetensors"))
    code, _, err = run_cli("size", folder)
    assert code == 2 and "not a regular file" in err, err
    os.remove(os.path.join(folder, "model.safetensors"))
    index = json.dumps({"weight_map": {"a": "loop.safetensors"}})
    (tmp_path / "ckpt" / "model.safetensors.index.json").write_text(index)
    os.symlink("loop.safetensors", os.path.join(folder, "loop.safetensors"))
    code, _, err = run_cli("size", folder)
    assert code == 2 and "is missing from" in err, err


def test_more_safetensors_files_than_the_cap_are_refused_not_cut(tmp_path, monkeypatch):
    """Past the cap the files were silently cut to the first 4,096: weights undercounted."""
    import kvplan.inputs.checkpoint as checkpoint

    from helpers import run_cli

    monkeypatch.setattr(checkpoint, "MAX_SHARDS", 3)
    shard = _header({"w": {"dtype": "BF16", "shape": [4]}})
    folder = _checkpoint(tmp_path, {f"s{i}.safetensors": shard for i in range(4)})
    code, _, err = run_cli("size", folder)
    assert code == 2 and "more than 3 .safetensors files" in err, err


def test_a_hugging_face_cache_snapshot_reads_through_its_links(tmp_path):
    """The cache's snapshots hold links into ../../blobs: they were refused as 'missing'."""
    blobs, snap = tmp_path / "blobs", tmp_path / "snapshots" / "abc"
    blobs.mkdir()
    snap.mkdir(parents=True)
    (blobs / "cfg").write_text(CONFIG)
    (blobs / "shard").write_bytes(_header({"model.embed_tokens.weight": {
        "dtype": "BF16", "shape": [128256, 4096], "data_offsets": [0, 1]}}))  # fmt: skip
    index = {"weight_map": {"model.embed_tokens.weight": "model-00001-of-00001.safetensors"}}
    (blobs / "index").write_text(json.dumps(index))
    os.symlink("../../blobs/cfg", snap / "config.json")
    os.symlink("../../blobs/shard", snap / "model-00001-of-00001.safetensors")
    os.symlink("../../blobs/index", snap / "model.safetensors.index.json")
    data = run_json("size", str(snap))
    assert data["model"]["weights_bytes"] == 128256 * 4096 * 2


def test_a_checkpoint_far_from_the_configs_count_says_so_where_its_bytes_are_used(tmp_path):
    """The check sits with the weights notes (kvplan.formulas.weights), not in the loader: it
    shows where the checkpoint's bytes are the weights, and not under an explicit dtype."""
    from helpers import run_cli

    folder = _checkpoint(tmp_path, {"model.safetensors": SHARD})  # one layer of Llama-3.1-8B
    code, out, err = run_cli("size", folder, "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    differs = [n for n in data["notes"] if n["id"] == "checkpoint-differs"]
    assert data["model"]["weights_bytes"] == 128256 * 4096 * 2 + 4096 * 4096 + 32 * 32 * 4
    assert len(differs) == 1 and "in bf16 gives 14.96 GiB" in differs[0]["text"], differs
    code, out, err = run_cli("size", folder, "--weights-dtype", "bf16", "--format", "json")
    assert code == 0, err
    assert "checkpoint-differs" not in [n["id"] for n in json.loads(out)["notes"]]
