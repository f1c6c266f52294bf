"""Where a model's config.json comes from: a bundled alias, a path, or the Hugging Face Hub.

Loading is JSON parsing only: no `trust_remote_code`, no `auto_map` import, nothing executed.
"""

from __future__ import annotations

import json
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

from kvplan.errors import KvplanError
from kvplan.notes import note

HUB_TIMEOUT_S = 10


class BundledModel(NamedTuple):
    alias: str
    file: str
    repo_ids: tuple[str, ...]


@lru_cache(maxsize=1)
def bundled_models() -> dict[str, BundledModel]:
    index = json.loads((_bundled_dir() / "index.json").read_text(encoding="utf-8"))
    return {
        alias: BundledModel(alias, entry["file"], tuple(entry.get("repo_ids", ())))
        for alias, entry in index["models"].items()
    }


def _bundled_dir() -> Path:
    import kvplan.model_configs as package  # the model_configs/ folder, shipped in the wheel

    return Path(package.__path__[0])


def _lookup_bundled(name: str) -> BundledModel | None:
    key = name.strip().lower()
    models = bundled_models()
    if key in models:
        return models[key]
    for model in models.values():
        if key in (r.lower() for r in model.repo_ids) or key == model.file.lower():
            return model
    return None


# Suffixes of Hugging Face ids that name the same architecture and the same weights' shapes
# (instruction tuning, a dated refresh). Quantized variants (FP8, AWQ, GPTQ, ...) change the
# weights and are never resolved this way.
VARIANT_SUFFIX = re.compile(r"-(instruct|chat|it|base|hf|thinking|\d{4})$", re.IGNORECASE)
QUANTIZED = re.compile(r"fp8|fp4|awq|gptq|int4|int8|w4a16|w8a8|bnb|gguf|exl2|mlx|nvfp4|mxfp4", re.I)


def _strip_variant(repo_id: str) -> str:
    previous = None
    while previous != repo_id:
        previous, repo_id = repo_id, VARIANT_SUFFIX.sub("", repo_id)
    return repo_id.lower()


def resolve_variant(name: str) -> BundledModel | None:
    """A bundled model whose Hugging Face id is `name` up to instruction/date suffixes
    (Qwen/Qwen2.5-72B-Instruct -> Qwen/Qwen2.5-72B); None for quantized or unknown variants."""
    if not _looks_like_repo_id(name) or QUANTIZED.search(name):
        return None
    wanted = _strip_variant(name.strip())
    for model in bundled_models().values():
        if any(_strip_variant(r) == wanted for r in model.repo_ids):
            return model
    return None


def parse_config_text(text: str, source: str) -> dict:
    """Python's json accepts the non-standard `Infinity` that real configs (Nemotron-H) contain."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        msg = getattr(exc, "msg", "too deeply nested")
        raise KvplanError(f"{source}: invalid JSON ({msg})") from None
    if not isinstance(data, dict):
        raise KvplanError(f"{source}: config.json must hold a JSON object")
    return data


def load_config(model: str) -> tuple[dict, str, str]:
    """(config dict, display name, source description) for a model argument."""
    if not isinstance(model, str) or not model.strip():
        raise KvplanError("no model given")
    if model.strip().lower().endswith(".gguf"):
        raise KvplanError(f"{model}: a GGUF file has no config.json (load it with load_model)")
    bundled = _lookup_bundled(model)
    if bundled is not None:
        text = (_bundled_dir() / bundled.file).read_text(encoding="utf-8")
        return parse_config_text(text, bundled.alias), bundled.alias, f"bundled:{bundled.file}"
    path = Path(model).expanduser()
    if path.exists() or model.endswith(".json") or model.startswith((".", "/", "~")):
        return _load_path(path)
    variant = resolve_variant(model)
    if variant is not None:
        text = (_bundled_dir() / variant.file).read_text(encoding="utf-8")
        return parse_config_text(text, model), model, f"variant:{variant.alias}"
    if _looks_like_repo_id(model):
        text = fetch_hub_config(model)
        return parse_config_text(text, model), model, f"hub:{model}"
    raise KvplanError(_unknown_message(model))


def _load_path(path: Path) -> tuple[dict, str, str]:
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise KvplanError(f"{path}: no such config file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise KvplanError(f"{path}: cannot read ({exc.__class__.__name__})") from None
    name = path.parent.name if path.name == "config.json" else path.stem
    return parse_config_text(text, str(path)), name or str(path), str(path)


def _looks_like_repo_id(model: str) -> bool:
    parts = model.split("/")
    return len(parts) == 2 and all(parts) and " " not in model


def _unknown_message(model: str) -> str:
    import difflib

    names = list(bundled_models())
    close = difflib.get_close_matches(model.lower(), names, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return (
        f"unknown model {model!r}: not a bundled name, a config path or an owner/name Hub id"
        f"{hint} (kvplan models lists the bundled ones)"
    )


def fetch_hub_config(repo_id: str) -> str:
    """Download only config.json (cached by huggingface-hub), failing fast and clearly offline:
    the local cache first, then a short reachability probe, then one download."""
    os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", str(HUB_TIMEOUT_S))
    os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", str(HUB_TIMEOUT_S))
    try:
        import huggingface_hub
        from huggingface_hub import constants
        from huggingface_hub import errors as hub_errors
    except ImportError:  # pragma: no cover - a core dependency
        raise KvplanError("huggingface-hub is not installed; pass a path to config.json") from None
    unreachable = (
        f"{repo_id}: not in the local cache and the Hub cannot be reached "
        "(offline or HF_HUB_OFFLINE=1); pass a path to config.json"
    )
    try:
        cached = huggingface_hub.hf_hub_download(repo_id, "config.json", local_files_only=True)
        return Path(cached).read_text(encoding="utf-8")
    except (hub_errors.LocalEntryNotFoundError, hub_errors.EntryNotFoundError, OSError, ValueError):
        pass
    if constants.HF_HUB_OFFLINE or not _reachable(constants.ENDPOINT):
        raise KvplanError(unreachable)
    try:
        path = huggingface_hub.hf_hub_download(repo_id, "config.json")
    except hub_errors.GatedRepoError:
        raise KvplanError(
            f"{repo_id} is gated: accept its licence on the Hub and set HF_TOKEN"
        ) from None
    except hub_errors.RepositoryNotFoundError:
        raise KvplanError(
            f"{repo_id}: no such repository on the Hub (or it is private: set HF_TOKEN)"
        ) from None
    except hub_errors.LocalEntryNotFoundError:
        raise KvplanError(unreachable) from None
    except hub_errors.EntryNotFoundError:
        raise KvplanError(f"{repo_id}: the repository has no config.json") from None
    except hub_errors.HfHubHTTPError as exc:
        raise KvplanError(f"{repo_id}: the Hub answered {exc.__class__.__name__}") from None
    except (OSError, ValueError) as exc:
        raise KvplanError(
            f"{repo_id}: cannot fetch config.json ({exc.__class__.__name__})"
        ) from None
    return Path(path).read_text(encoding="utf-8")


def _reachable(endpoint: str, timeout_s: float = 3.0) -> bool:
    """One TCP connection to the Hub endpoint, so no-network fails in seconds, not retries."""
    import socket
    from urllib.parse import urlparse

    url = urlparse(endpoint)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def load_model(model: str):
    """A model argument -> ModelSpec."""
    from kvplan.inputs.architectures import build_model
    from kvplan.inputs.gguf import is_gguf_path, load_gguf

    if is_gguf_path(model):
        return load_gguf(model.strip())

    raw, name, source = load_config(model)
    spec = build_model(raw, name, source)
    hf_id = None
    if source.startswith("bundled:"):
        bundled = _lookup_bundled(model)
        if _looks_like_repo_id(model.strip()):
            hf_id = model.strip()  # the id the user named, as engines load it
        else:
            hf_id = bundled.repo_ids[0] if bundled and bundled.repo_ids else None
    elif source.startswith("hub:"):
        hf_id = source[len("hub:") :]
    elif source.startswith("variant:"):
        hf_id = model.strip()
        alias = source[len("variant:") :]
        spec = spec._replace(
            notes=(note("variant-resolved", repo_id=hf_id, alias=alias),) + spec.notes
        )
    return spec._replace(hf_id=hf_id, source=source)
