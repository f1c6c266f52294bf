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
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

from kvplan.errors import KvplanError
from kvplan.inputs.text import clean

if TYPE_CHECKING:
    from kvplan.anatomy.model import StoredWeights

DEFAULT_DEADLINE_S = 10.0
MAX_CONFIG_BYTES = 2 * 2**20
MAX_INDEX_BYTES = 16 * 2**20
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


class Deadline:
    """One exchange's deadline, the monotonic time `stop`, over all of it: every socket opened
    under it is shut down when it passes, so no connect, TLS handshake, header line or body read
    outlives it (a socket timeout bounds one receive only: a server that sends a byte per receive
    never meets it) and no worker is left holding a connection once the answer is printed."""

    def __init__(self, limit_s: float):
        self.stop = time.monotonic() + limit_s
        self.expired = False
        self._sockets: list = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(limit_s, self.expire)
        self._timer.daemon = True
        self._timer.start()

    def remaining(self) -> float:
        left = self.stop - time.monotonic()
        if left <= 0 or self.expired:
            raise HubFailure("timeout")
        return left

    def watch(self, sock) -> None:
        with self._lock:
            if not self.expired:
                self._sockets.append(sock)
                return
        _shut(sock)

    def expire(self) -> None:
        with self._lock:
            self.expired = True
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            _shut(sock)

    def close(self) -> None:
        """The exchange is over: no timer left, no socket left open."""
        self._timer.cancel()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            _shut(sock)


def _shut(sock) -> None:
    import socket

    try:
        sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in a receive on it
    except OSError:  # already closed, or detached into its TLS socket (watched itself)
        pass


class _WatchedContext:
    """An SSLContext whose sockets the deadline watches from before the handshake."""

    def __init__(self, context, deadline: Deadline):
        self._context, self._deadline = context, deadline

    def wrap_socket(self, sock, server_hostname=None, **kwargs):
        kwargs["do_handshake_on_connect"] = False
        tls = self._context.wrap_socket(sock, server_hostname=server_hostname, **kwargs)
        self._deadline.watch(tls)
        tls.do_handshake()
        return tls

    def __getattr__(self, name):
        return getattr(self._context, name)


def _watched(http_class, deadline: Deadline):
    """A connection factory for urllib's do_open: http_class with its sockets watched."""
    import socket

    def connect(address, timeout, source_address=None):
        sock = socket.create_connection(address, min(timeout, deadline.remaining()), source_address)
        deadline.watch(sock)
        return sock

    def connection(host, **kwargs):
        conn = http_class(host, **kwargs)
        conn._create_connection = connect  # the proxy's, for a tunnel
        if getattr(conn, "_context", None) is not None:
            conn._context = _WatchedContext(conn._context, deadline)
        return conn

    return connection


def _opener(deadline: Deadline):
    class Plain(urllib.request.HTTPHandler):
        def http_open(self, req):
            return self.do_open(_watched(http.client.HTTPConnection, deadline), req)

    class Tls(urllib.request.HTTPSHandler):
        def https_open(self, req):
            connection = _watched(http.client.HTTPSConnection, deadline)
            context = self._context  # type: ignore[attr-defined]  # urllib's own, not in typeshed
            return self.do_open(connection, req, context=context)

    return urllib.request.build_opener(_NoRedirect, Plain, Tls)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # redirects are followed by hand, counted
        return None


def _get(
    url: str, max_bytes: int, deadline: Deadline, byte_range: tuple[int, int] | None = None
) -> bytes:
    """GET `url` (following up to MAX_REDIRECTS redirects) within `deadline`."""
    try:
        return _get_within(url, max_bytes, deadline, byte_range)
    except HubFailure:
        if deadline.expired:  # a socket shut at the deadline fails as whatever it was doing
            raise HubFailure("timeout") from None
        raise


def _get_within(url, max_bytes, deadline, byte_range) -> bytes:
    import socket
    import ssl

    opener = _opener(deadline)
    origin = _origin(url)
    for _ in range(MAX_REDIRECTS + 1):
        remaining = deadline.remaining()
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
                exc.close()
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
            return _body(response, max_bytes, deadline)
    raise HubFailure("redirects")


def _body(response, max_bytes: int, deadline: Deadline) -> bytes:
    length = response.headers.get("Content-Length")
    length = length if length and length.isascii() and length.isdigit() else None
    if length and int(length) > max_bytes:
        raise HubFailure("too_large", f"{int(length):,} bytes")
    chunks, total = [], 0
    while True:
        deadline.remaining()
        try:  # read1: what one receive gives, so a trickle meets the deadline between reads
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
    if deadline.expired:  # the socket was shut: what came is not the whole body
        raise HubFailure("timeout")
    if length and len(body) < int(length):
        raise HubFailure("protocol", "the body ended early")
    return _decoded(body, response.headers.get("Content-Encoding"), max_bytes)


def _decoded(body: bytes, encoding: str | None, max_bytes: int) -> bytes:
    """The body as sent, un-gzipped where its Content-Encoding says gzip (or deflate; kvplan
    asks for neither, a proxy may compress unasked): decompressed within `max_bytes`, so a small
    bomb is refused, never inflated. Another Content-Encoding (br, zstd) is refused."""
    import zlib

    names = [n.strip().lower() for n in (encoding or "").split(",") if n.strip()]
    for name in reversed([n for n in names if n != "identity"]):  # the last applied, first
        if name not in ("gzip", "x-gzip", "deflate"):
            raise HubFailure("encoding", f"Content-Encoding {clean(name)[:20]}")
        inflater = zlib.decompressobj(32 + zlib.MAX_WBITS)  # a gzip or a zlib header
        try:
            out = inflater.decompress(body, max_bytes + 1)
            out += inflater.flush() if not inflater.unconsumed_tail else b""
        except zlib.error:
            raise HubFailure("encoding", f"a {name} body that does not decompress") from None
        if len(out) > max_bytes or inflater.unconsumed_tail:
            raise HubFailure("too_large", f"over {max_bytes:,} bytes decompressed")
        if not inflater.eof:
            raise HubFailure("encoding", f"a {name} body that ends early")
        body = out
    return body


def _origin(url: str) -> tuple[str, str]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme.lower(), parts.netloc.lower()


def with_deadline(work, limit_s: float):
    """Run `work(deadline)` in a daemon thread under one Deadline of `limit_s` seconds; at the
    deadline its sockets are shut and the caller goes on (work that does not return then, a
    name lookup or a parse, is abandoned: a daemon thread never holds the process's exit)."""
    deadline = Deadline(limit_s)
    box: dict = {}

    def run():
        try:
            box["value"] = work(deadline)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True, name="kvplan-hub")
    thread.start()
    thread.join(limit_s + 0.5)
    deadline.close()
    if thread.is_alive():
        raise HubFailure("timeout")
    if "error" in box:
        raise box["error"]
    return box["value"]


def parallel(function, items: list, deadline: Deadline, workers: int = 16) -> list:
    """[function(item) for item in items] on up to `workers` daemon threads (a pool's threads
    are joined at exit: one blocked in a read kept the process alive after its answer), the
    first failure raised, and no item started after it or after the deadline."""
    results: list = [None] * len(items)
    failures: list = []
    done = [0]
    lock = threading.Lock()
    queue = iter(range(len(items)))

    def worker():
        while True:
            with lock:
                index = next(queue, None)
            if index is None or failures or deadline.expired:
                return
            try:
                results[index] = function(items[index])
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                failures.append(exc)
                return
            with lock:
                done[0] += 1

    threads = [
        threading.Thread(target=worker, daemon=True, name="kvplan-hub-shard")
        for _ in range(min(workers, len(items)))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline.stop - time.monotonic()) + 0.5)
    if failures:
        raise failures[0]
    if done[0] < len(items):
        raise HubFailure("timeout")
    return results


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
    if kind == "encoding":
        return f"{repo_id}: the Hub sent {what} as {detail}, which kvplan cannot read; retry"
    if kind == "tls":
        return f"{repo_id}: the TLS handshake with {endpoint()} failed ({detail})"
    return f"{repo_id}: the Hub's answer was not valid HTTP ({clean(detail)})"


def check_repo_id(repo_id: str) -> str:
    repo_id = repo_id.strip()
    if not REPO_ID.fullmatch(repo_id) or ".." in repo_id:
        raise KvplanError(f"{clean(repo_id)[:80]!r} is not a Hugging Face repository id")
    return repo_id


def _cached_config(repo_id: str) -> tuple[str, Path] | None:
    """huggingface-hub's cached config.json: (text, path)."""
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
                return Path(path).read_text(encoding="utf-8"), Path(path)
        except (OSError, UnicodeDecodeError):
            return None
    return None


def _kvplan_cache(repo_id: str) -> Path:
    base = Path(os.environ.get("KVPLAN_CACHE", Path.home() / ".cache" / "kvplan"))
    return base / "configs" / repo_id.replace("/", "--") / "config.json"


def fetch_config(repo_id: str, parse):
    """`parse(text)` of a Hub repository's config.json (parse raises KvplanError for a text that
    is no config): the huggingface-hub cache, kvplan's cache, then one download within the
    deadline, saved to kvplan's cache only once it parsed. A kvplan cache entry that no longer
    parses is discarded and fetched again; huggingface-hub's is not kvplan's to delete, so the
    error names it."""
    repo_id = check_repo_id(repo_id)
    cached = _cached_config(repo_id)
    if cached is not None:
        text, path = cached
        try:
            return parse(text)
        except KvplanError as exc:
            raise KvplanError(
                f"{exc} (huggingface-hub's cached copy {path}: delete it to download it again)"
            ) from None
    mine = _kvplan_cache(repo_id)
    if mine.is_file():
        try:
            return parse(mine.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, KvplanError):
            _discard(mine)  # an entry of an older kvplan or a damaged disk: fetched again
    if offline():
        raise KvplanError(
            f"{repo_id}: not in the local cache and HF_HUB_OFFLINE is set; pass a path to config.json"
        )
    limit = deadline_s()
    url = f"{endpoint()}/{repo_id}/resolve/main/config.json"
    try:
        body = with_deadline(lambda deadline: _get(url, MAX_CONFIG_BYTES, deadline), limit)
        if body[:2] == b"\x1f\x8b":  # gzip's magic bytes, no Content-Encoding: a .gz as is
            body = _decoded(body, "gzip", MAX_CONFIG_BYTES)
    except HubFailure as failure:
        raise KvplanError(message(repo_id, "config.json", failure, limit)) from None
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise KvplanError(f"{repo_id}: the Hub's config.json is not UTF-8 text") from None
    config = parse(text)  # a proxy's login page (HTML, status 200) stops here, uncached
    _save(mine, text)
    return config


def _discard(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def _save(path: Path, text: str) -> None:
    """Best effort: a cache that cannot be written is no error."""
    from kvplan.atomic import write_atomic

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"), "cache", alone=True)
    except (KvplanError, OSError):
        pass


def fetch_safetensors_headers(repo_id: str, limit_s: float) -> dict[str, tuple[str, list]] | None:
    """{tensor: (dtype, shape)} from a Hub repository's safetensors headers (range requests,
    shards in parallel), or None when it has none or the Hub does not answer in time. Every
    shard's header length comes first: their total is bounded before any header is downloaded,
    and the tensor count before each next one is parsed (a checkpoint past either bound is a
    KvplanError, as a local one is)."""
    from kvplan.inputs import checkpoint

    repo_id = check_repo_id(repo_id)
    if offline():
        return None
    base = f"{endpoint()}/{repo_id}/resolve/main"
    source = f"hub:{repo_id}"

    def work(deadline: Deadline) -> dict:
        try:
            raw = _get(f"{base}/model.safetensors.index.json", MAX_INDEX_BYTES, deadline)
            index = json.loads(raw)
            shards = sorted({str(v) for v in index.get("weight_map", {}).values()})
        except HubFailure as failure:
            if failure.kind != "http404":
                raise
            shards = ["model.safetensors"]
        if (
            not shards
            or len(shards) > checkpoint.MAX_SHARDS
            or any("/" in s or ".." in s for s in shards)
        ):
            raise HubFailure("protocol", "an unusable safetensors index")
        urls = [f"{base}/{urllib.parse.quote(name)}" for name in shards]

        def length(url: str) -> int:
            return checkpoint.header_length(Path(url), _get(url, 16, deadline, (0, 7)))

        lengths = parallel(length, urls, deadline)
        checkpoint.check_totals(sum(lengths), 0, source)
        tensors: dict = {}
        lock = threading.Lock()

        def header(item: tuple[str, int]) -> None:
            url, size = item
            with lock:
                checkpoint.check_totals(0, len(tensors), source)
            part = checkpoint.parse_header(_get(url, size, deadline, (8, 8 + size - 1)), url)
            with lock:
                tensors.update(part)
                checkpoint.check_totals(0, len(tensors), source)

        parallel(header, list(zip(urls, lengths, strict=True)), deadline)
        return tensors

    try:
        return with_deadline(work, limit_s)
    except checkpoint.TooLarge:
        raise
    except (HubFailure, KvplanError, ValueError, AttributeError, TypeError, RecursionError):
        return None  # no answer in time, or a malformed index or header: weights from the config


def hub_checkpoint(repo_id: str, num_layers: int, limit_s: float) -> StoredWeights | None:
    """The weights of a Hub repository from its safetensors headers (HTTP range requests); None
    when it has none, or the Hub does not answer within `limit_s` seconds."""
    from kvplan.inputs import checkpoint

    tensors = fetch_safetensors_headers(repo_id, limit_s)
    if not tensors:
        return None
    return checkpoint.summarize(tensors, num_layers, f"hub:{repo_id} (safetensors headers)")
