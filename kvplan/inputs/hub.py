"""The Hugging Face Hub, within bounds: one overall deadline per access (KVPLAN_HUB_TIMEOUT
seconds, default 10), a size cap on every download, no retries, and one clear message per failure
kind (unreachable, no answer in time, gated, not found, server error, not JSON, too large). Only
config.json and safetensors headers are ever fetched; nothing from a repository is executed.

huggingface-hub is used for what it does locally (its cache, the token); the transfers are plain
HTTP(S) with a deadline kvplan controls, because the library's own retries can hold a command for
minutes against a server that accepts and never answers."""

from __future__ import annotations

import http.client
import json
import os
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from kvplan.errors import KvplanError
from kvplan.inputs.text import clean

DEFAULT_DEADLINE_S = 10.0
MAX_CONFIG_BYTES = 2 * 2**20
MAX_INDEX_BYTES = 16 * 2**20
MAX_HEADER_BYTES = 64 * 2**20
MAX_REDIRECTS = 5
DEFAULT_ENDPOINT = "https://huggingface.co"
REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")


class HubFailure(Exception):
    """One failed transfer: `kind` decides the message."""

    def __init__(self, kind: str, detail: str = ""):
        super().__init__(kind)
        self.kind, self.detail = kind, detail


def deadline_s() -> float:
    raw = os.environ.get("KVPLAN_HUB_TIMEOUT", "")
    if not raw:
        return DEFAULT_DEADLINE_S
    try:
        value = float(raw)
    except ValueError:
        raise KvplanError(
            f"KVPLAN_HUB_TIMEOUT={clean(raw)[:20]!r} is not a number of seconds"
        ) from None
    if not 0.1 <= value <= 600:
        raise KvplanError("KVPLAN_HUB_TIMEOUT must be between 0.1 and 600 seconds")
    return value


def endpoint() -> str:
    url = os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise KvplanError(f"HF_ENDPOINT={clean(url)[:60]!r} is not an http(s) URL")
    return url


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _token() -> str | None:
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if token:
        return token.strip()
    path = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "token"
    try:
        return path.read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # redirects are followed by hand, counted
        return None


def _get(url: str, max_bytes: int, stop: float, byte_range: tuple[int, int] | None = None) -> bytes:
    """GET `url` (following up to MAX_REDIRECTS redirects) before the monotonic time `stop`."""
    import socket
    import ssl
    import time

    opener = urllib.request.build_opener(_NoRedirect)
    origin = _origin(url)
    for _ in range(MAX_REDIRECTS + 1):
        remaining = stop - time.monotonic()
        if remaining <= 0:
            raise HubFailure("timeout")
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):  # file:, ftp:, data:
            raise HubFailure("protocol", "a redirect to a URL that is not http(s)")
        request = urllib.request.Request(url, headers={"User-Agent": "kvplan"})
        token = _token()
        if token and _origin(url) == origin:  # never sent on to another host (a CDN, or worse)
            request.add_header("Authorization", f"Bearer {token}")
        if byte_range:
            request.add_header("Range", f"bytes={byte_range[0]}-{byte_range[1]}")
        try:
            response = opener.open(request, timeout=max(0.05, remaining))
        except urllib.error.HTTPError as exc:
            if exc.code in (301, 302, 303, 307, 308) and exc.headers.get("Location"):
                url = urllib.parse.urljoin(url, exc.headers["Location"])
                continue
            code = exc.headers.get("X-Error-Code", "") if exc.headers else ""
            raise HubFailure(f"http{exc.code}", code) from None
        except TimeoutError:
            raise HubFailure("timeout") from None
        except ssl.SSLError as exc:
            raise HubFailure("tls", exc.__class__.__name__) from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, (TimeoutError, socket.timeout)):
                raise HubFailure("timeout") from None
            if isinstance(exc.reason, ssl.SSLError):
                raise HubFailure("tls", exc.reason.__class__.__name__) from None
            raise HubFailure("unreachable", str(exc.reason)[:80]) from None
        except (OSError, ValueError, http.client.HTTPException) as exc:  # bad status lines, resets
            raise HubFailure("protocol", exc.__class__.__name__) from None
        with response:
            length = response.headers.get("Content-Length")
            if length and length.isdigit() and int(length) > max_bytes:
                raise HubFailure("too_large", f"{int(length):,} bytes")
            chunks, total = [], 0
            while True:
                remaining = stop - time.monotonic()
                if remaining <= 0:
                    raise HubFailure("timeout")
                try:  # read1: what one receive gives, so a trickle cannot outlast the deadline
                    chunk = response.read1(min(65536, max_bytes + 1 - total))
                except TimeoutError:
                    raise HubFailure("timeout") from None
                except (OSError, ValueError, http.client.HTTPException) as exc:
                    raise HubFailure("protocol", exc.__class__.__name__) from None
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
                if total > max_bytes:
                    raise HubFailure("too_large", f"over {max_bytes:,} bytes")
            body = b"".join(chunks)
            if length and length.isdigit() and len(body) < int(length):
                raise HubFailure("protocol", "the body ended early")
            return body
    raise HubFailure("redirects")


def _origin(url: str) -> tuple[str, str]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme.lower(), parts.netloc.lower()


def with_deadline(work, limit_s: float):
    """Run `work(stop)` in a worker thread and give up at the deadline, whatever it is doing (a
    read blocked in the TLS layer cannot be interrupted otherwise; the thread is abandoned)."""
    import time

    stop = time.monotonic() + limit_s
    box: dict = {}

    def run():
        try:
            box["value"] = work(stop)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True, name="kvplan-hub")
    thread.start()
    thread.join(limit_s + 0.5)
    if thread.is_alive():
        raise HubFailure("timeout")
    if "error" in box:
        raise box["error"]
    return box["value"]


def message(repo_id: str, what: str, failure: HubFailure, limit_s: float) -> str:
    kind, detail = failure.kind, failure.detail
    if kind == "timeout":
        return (
            f"{repo_id}: the Hub did not answer within {limit_s:g} s (KVPLAN_HUB_TIMEOUT); "
            "pass a path to config.json, or retry"
        )
    if kind == "unreachable":
        return (
            f"{repo_id}: not in the local cache and the Hub cannot be reached ({clean(detail)}); "
            "pass a path to config.json"
        )
    if kind in ("http401", "http403") or detail == "GatedRepo":
        return f"{repo_id} is gated or private: accept its licence on the Hub and set HF_TOKEN"
    if kind == "http404":
        if detail == "EntryNotFound":
            return f"{repo_id}: the repository has no {what}"
        return f"{repo_id}: no such repository on the Hub (or it is private: set HF_TOKEN)"
    if kind.startswith("http"):
        return f"{repo_id}: the Hub answered HTTP {kind[4:]} for {what}; retry later"
    if kind == "too_large":
        return f"{repo_id}: {what} is too large to be one ({detail})"
    if kind == "redirects":
        return f"{repo_id}: the Hub redirected more than {MAX_REDIRECTS} times"
    if kind == "tls":
        return f"{repo_id}: the TLS handshake with {endpoint()} failed ({detail})"
    return f"{repo_id}: the Hub's answer was not valid HTTP ({clean(detail)})"


def check_repo_id(repo_id: str) -> str:
    repo_id = repo_id.strip()
    if not REPO_ID.fullmatch(repo_id) or ".." in repo_id:
        raise KvplanError(f"{clean(repo_id)[:80]!r} is not a Hugging Face repository id")
    return repo_id


def _cached_config(repo_id: str) -> str | None:
    try:
        from huggingface_hub import try_to_load_from_cache
    except (ImportError, ValueError):  # ValueError: a malformed HF_* variable at import
        return None
    try:
        path = try_to_load_from_cache(repo_id, "config.json")
    except (ValueError, OSError):
        return None
    if isinstance(path, str) and Path(path).is_file():
        try:
            if Path(path).stat().st_size <= MAX_CONFIG_BYTES:
                return Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None
    return None


def _kvplan_cache(repo_id: str) -> Path:
    base = Path(os.environ.get("KVPLAN_CACHE", Path.home() / ".cache" / "kvplan"))
    return base / "configs" / repo_id.replace("/", "--") / "config.json"


def fetch_config(repo_id: str) -> str:
    """config.json of a Hub repository: the huggingface-hub cache, kvplan's cache, then one
    download within the deadline (saved to kvplan's cache)."""
    repo_id = check_repo_id(repo_id)
    cached = _cached_config(repo_id)
    if cached is not None:
        return cached
    mine = _kvplan_cache(repo_id)
    if mine.is_file():
        try:
            return mine.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            pass
    if offline():
        raise KvplanError(
            f"{repo_id}: not in the local cache and HF_HUB_OFFLINE is set; pass a path to config.json"
        )
    limit = deadline_s()
    url = f"{endpoint()}/{repo_id}/resolve/main/config.json"
    try:
        body = with_deadline(lambda stop: _get(url, MAX_CONFIG_BYTES, stop), limit)
    except HubFailure as failure:
        raise KvplanError(message(repo_id, "config.json", failure, limit)) from None
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise KvplanError(f"{repo_id}: the Hub's config.json is not UTF-8 text") from None
    _save(mine, text)
    return text


def _save(path: Path, text: str) -> None:
    """Best effort: a cache that cannot be written is no error."""
    from kvplan.present.output import write_atomic

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"), "cache", alone=True)
    except (KvplanError, OSError):
        pass


def fetch_safetensors_headers(repo_id: str, limit_s: float) -> dict[str, tuple[str, list]] | None:
    """{tensor: (dtype, shape)} from a Hub repository's safetensors headers (range requests,
    shards in parallel), or None when it has none or the Hub does not answer in time."""
    import struct
    from concurrent.futures import ThreadPoolExecutor

    repo_id = check_repo_id(repo_id)
    if offline():
        return None
    base = f"{endpoint()}/{repo_id}/resolve/main"

    def header(stop: float, name: str) -> dict:
        head = _get(f"{base}/{urllib.parse.quote(name)}", 16, stop, (0, 7))
        if len(head) < 8:
            raise HubFailure("protocol", "short safetensors header")
        (length,) = struct.unpack("<Q", head[:8])
        if length <= 1 or length > MAX_HEADER_BYTES:
            raise HubFailure("too_large", f"a header of {length:,} bytes")
        raw = _get(f"{base}/{urllib.parse.quote(name)}", length, stop, (8, 8 + length - 1))
        data = json.loads(raw)
        return {k: (v.get("dtype"), v.get("shape")) for k, v in data.items() if k != "__metadata__"}

    def work(stop: float) -> dict:
        try:
            index = json.loads(_get(f"{base}/model.safetensors.index.json", MAX_INDEX_BYTES, stop))
            shards = sorted({str(v) for v in index.get("weight_map", {}).values()})
        except HubFailure as failure:
            if failure.kind != "http404":
                raise
            shards = ["model.safetensors"]
        if not shards or len(shards) > 4096 or any("/" in s or ".." in s for s in shards):
            raise HubFailure("protocol", "an unusable safetensors index")
        tensors: dict = {}
        with ThreadPoolExecutor(max_workers=min(16, len(shards))) as pool:
            for part in pool.map(lambda name: header(stop, name), shards):
                tensors.update(part)
        return tensors

    try:
        return with_deadline(work, limit_s)
    except (HubFailure, ValueError, AttributeError, TypeError, RecursionError):
        return None
