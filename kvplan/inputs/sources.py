"""Where a model's config.json comes from: a bundled alias, a path, or the Hugging Face Hub; and,
where the checkpoint itself can be read, its safetensors headers (the exact weight bytes).

Loading is JSON parsing only: no `trust_remote_code`, no `auto_map` import, nothing executed.
"""

import json
import re
from functools import lru_cache
from pathlib import Path

from kvplan.errors import KvplanError
from kvplan.inputs.files import user_path
from kvplan.inputs.text import clean
from kvplan.notes import Note, note
from kvplan.record import NamedTuple

MAX_CONFIG_BYTES = 8 * 2**20  # the largest real config.json is a few hundred KB
MAX_JSON_DEPTH = 64


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
VARIANT_SUFFIX = r"-(instruct|chat|it|base|hf|thinking|\d{4})$"  # compiled on use (start-up)
QUANTIZED = (
    "fp8",
    "fp4",
    "awq",
    "gptq",
    "int4",
    "int8",
    "w4a16",
    "w8a8",
    "bnb",
    "gguf",
    "exl2",
    "mlx",
)


def _strip_variant(repo_id: str) -> str:
    previous = None
    while previous != repo_id:
        previous, repo_id = repo_id, re.sub(VARIANT_SUFFIX, "", repo_id, flags=re.IGNORECASE)
    return repo_id.lower()


def resolve_variant(name: str) -> BundledModel | None:
    """A bundled model whose Hugging Face id is `name` up to instruction/date suffixes
    (Qwen/Qwen2.5-72B-Instruct -> Qwen/Qwen2.5-72B); None for quantized or unknown variants."""
    if not _looks_like_repo_id(name) or any(tag in name.lower() for tag in QUANTIZED):
        return None
    wanted = _strip_variant(name.strip())
    for model in bundled_models().values():
        if any(_strip_variant(r) == wanted for r in model.repo_ids):
            return model
    return None


def find_bundled(name: str) -> BundledModel | None:
    """The bundled model a Hugging Face id names: its own file (zai-org/GLM-5-FP8, a quantized
    checkpoint bundled under its id), else a variant of one (resolve_variant); None if neither."""
    own = _lookup_bundled(name) if _looks_like_repo_id(name) else None
    return own or resolve_variant(name)


def _depth(value, limit: int) -> int:
    """Nesting depth of parsed JSON, stopping past `limit`."""
    stack, deepest = [(value, 1)], 0
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return deepest


def parse_config_text(text: str, source: str, what: str = "config.json") -> dict:
    """Python's json accepts the non-standard `Infinity` that real configs (Nemotron-H) contain."""
    source = clean(source)
    text = text.removeprefix("\ufeff")  # a byte-order mark (Windows editors), as traces allow
    if len(text) > MAX_CONFIG_BYTES:
        raise KvplanError(f"{source}: over {MAX_CONFIG_BYTES // 2**20} MiB, not a {what}")
    try:
        data = json.loads(text)
    except RecursionError:
        raise KvplanError(f"{source}: invalid JSON (too deeply nested)") from None
    except json.JSONDecodeError as exc:
        raise KvplanError(f"{source}: invalid JSON ({exc.msg} at line {exc.lineno})") from None
    except ValueError as exc:  # e.g. an integer of thousands of digits
        raise KvplanError(f"{source}: invalid JSON ({str(exc)[:80]})") from None
    if not isinstance(data, dict):
        raise KvplanError(f"{source}: {what} must hold a JSON object")
    if _depth(data, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
        raise KvplanError(f"{source}: nested deeper than {MAX_JSON_DEPTH} levels")
    return data


class ModelArgument(NamedTuple):
    """What a model argument names, in the one order every command reads it (resolve)."""

    kind: str  # path | gguf | bundled | variant | hub
    text: str  # the argument without surrounding spaces
    path: Path | None = None  # path, gguf
    bundled: BundledModel | None = None  # bundled, variant
    # A path that exists, read in place of what the same spelling also names: the bundled
    # alias or the Hub id (None when it names nothing else)
    instead_of: str | None = None


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):  # a name too long for the file system, a NUL
        return False


def resolve(model: str) -> ModelArgument:
    """A model argument -> what it names. An existing path comes first, as engines read their
    model argument (vLLM and transformers load a local folder before asking the Hub); then a
    .gguf path, a bundled name, an argument shaped like a path (an error: no such file), a
    variant of a bundled Hub id, a Hub id."""
    if not isinstance(model, str) or not model.strip():
        raise KvplanError("no model given")
    if len(model) > 4096 or "\x00" in model:
        raise KvplanError("the model argument is not a name, a path or a repository id")
    text = model.strip()
    path = user_path(model)
    gguf = text.lower().endswith(".gguf")
    bundled = None if gguf else _lookup_bundled(model)
    if _exists(path):
        if gguf and not path.is_dir():
            return ModelArgument("gguf", text, path)
        variant = None if bundled else resolve_variant(model)
        instead: str | None
        if bundled is not None:
            instead = f"bundled:{bundled.alias}"
        elif variant is not None:
            instead = f"bundled:{variant.alias}"
        else:
            instead = f"hub:{clean(text)}" if _looks_like_repo_id(text) else None
        return ModelArgument("path", text, path, instead_of=instead)
    if gguf:
        return ModelArgument("gguf", text, path)
    if bundled is not None:
        return ModelArgument("bundled", text, bundled=bundled)
    if model.endswith(".json") or model.startswith((".", "/", "~")):
        return ModelArgument("path", text, path)
    variant = resolve_variant(model)
    if variant is not None:
        return ModelArgument("variant", text, bundled=variant)
    if _looks_like_repo_id(model):
        return ModelArgument("hub", text)
    raise KvplanError(_unknown_message(model))


def load_config(model: str | ModelArgument) -> tuple[dict, str, str]:
    """(config dict, display name, source description) for a model argument."""
    arg = model if isinstance(model, ModelArgument) else resolve(model)
    if arg.kind == "gguf":
        raise KvplanError(f"{arg.text}: a GGUF file has no config.json (load it with load_model)")
    if arg.kind == "path":
        assert arg.path is not None, "a path argument has its path"
        try:
            return _load_path(arg.path)
        except KvplanError as exc:
            if arg.instead_of is None:
                raise
            # a file or folder of that name here hides the bundled or Hub model: say why it was read
            kind = "bundled" if arg.instead_of.startswith("bundled:") else "Hub"
            raise KvplanError(
                f"{exc} (an existing path is read before the {kind} model of the same name: run "
                "from another folder for it)"
            ) from None
    if arg.kind == "bundled":
        assert arg.bundled is not None, "a bundled argument has its bundled model"
        text = (_bundled_dir() / arg.bundled.file).read_text(encoding="utf-8")
        return (
            parse_config_text(text, arg.bundled.alias),
            arg.bundled.alias,
            f"bundled:{arg.bundled.file}",
        )
    if arg.kind == "variant":
        assert arg.bundled is not None, "a variant argument has its bundled model"
        text = (_bundled_dir() / arg.bundled.file).read_text(encoding="utf-8")
        return parse_config_text(text, arg.text), arg.text, f"variant:{arg.bundled.alias}"
    from kvplan.inputs.hub import fetch_config

    config = fetch_config(arg.text, lambda text: parse_config_text(text, arg.text))
    return config, arg.text, f"hub:{arg.text}"


def _read_text(path: Path, what: str = "a config.json") -> str:
    """A regular file's text, capped: FIFOs, devices and huge files are refused before reading."""
    from kvplan.inputs.files import read_regular

    raw = read_regular(path, MAX_CONFIG_BYTES, what)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise KvplanError(f"{path}: not UTF-8 text") from None


def _load_path(path: Path) -> tuple[dict, str, str]:
    try:
        is_dir = path.is_dir()
    except OSError as exc:
        raise KvplanError(
            f"{path}: cannot read ({exc.strerror or exc.__class__.__name__})"
        ) from None
    if is_dir:
        path = path / "config.json"
    elif path.exists() and not path.is_file():
        raise KvplanError(
            f"{clean(str(path))[:200]}: not a regular file (a device, FIFO or socket), not a config"
        )
    if not path.is_file():
        raise KvplanError(f"{clean(str(path))[:200]}: no such config file")
    text = _read_text(path)
    name = path.parent.name if path.name == "config.json" else path.stem
    return parse_config_text(text, str(path)), clean(name or str(path)), str(path)


# ModelOpt 0.29 and earlier write the quantization config to this file beside config.json; vLLM
# reads it where config.json has no quantization_config (transformers_utils/config.py get_config:
# 0.13.0:665-673, 0.14.0:684-693, 0.19.0:742-751, 0.21.0:782-791, 0.32.0:890-899), as the
# config's quantization_config, weights format and KV cache alike
HF_QUANT_CONFIG = "hf_quant_config.json"


def with_hf_quant_config(raw: dict, source: str) -> tuple[dict, tuple[Note, ...]]:
    """(config.json's dict with the hf_quant_config.json beside it as its quantization_config,
    the note that names the file) where config.json read from a folder has no
    quantization_config and the folder has that file, as vLLM reads it; else (raw, ()). The
    file is read as config.json is (a regular file, capped, JSON only): a folder, a FIFO, a
    huge or invalid file is an error, as it fails vLLM's load."""
    path = Path(source)
    if path.name != "config.json" or raw.get("quantization_config") is not None:
        return raw, ()
    beside = path.parent / HF_QUANT_CONFIG
    try:
        present = beside.exists()  # file_or_path_exists: os.path.exists, links followed
    except OSError:
        present = False
    if not present:
        return raw, ()
    what = HF_QUANT_CONFIG
    quant = parse_config_text(_read_text(beside, f"an {what}"), str(beside), what)
    return {**raw, "quantization_config": quant}, (note("quant-hf-file", path=clean(str(beside))),)


def _looks_like_repo_id(model: str) -> bool:
    parts = model.strip().split("/")
    return (
        len(parts) == 2
        and all(parts)
        and not any(p in (".", "..") for p in parts)  # ./x and ../x are paths
        and " " not in model
    )


def _unknown_message(model: str) -> str:
    import difflib

    names = list(bundled_models())
    close = difflib.get_close_matches(model.lower(), names, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return (
        f"unknown model {clean(model)[:80]!r}: not a bundled name, a config path or an owner/name "
        f"Hub id{hint} (kvplan models lists the bundled ones)"
    )


def load_bundled(alias: str):
    """A bundled model by its alias, whatever the current folder holds (a listing of the bundled
    models, a default model): never a path of the same name."""
    bundled = bundled_models().get(alias)
    if bundled is None:
        raise KvplanError(_unknown_message(alias))
    return load_model(ModelArgument("bundled", alias, bundled=bundled))


def load_model(model: str | ModelArgument, checkpoint: bool = True):
    """A model argument -> ModelSpec. With `checkpoint`, the weights come from the safetensors
    headers where they can be read (a local checkpoint folder; a Hub repository within the
    deadline), cross-checked against the config's count. Every command reads its model here,
    in resolve's order."""
    from kvplan.inputs.architectures import build_model

    arg = model if isinstance(model, ModelArgument) else resolve(model)
    if arg.kind == "gguf":
        from kvplan.inputs.gguf import load_gguf

        return load_gguf(arg.text)

    raw, name, source = load_config(arg)
    quant_file: tuple[Note, ...] = ()
    if arg.kind == "path":
        raw, quant_file = with_hf_quant_config(raw, source)
    spec = build_model(raw, name, source)
    hf_id: str | None = None
    notes: tuple[Note, ...] = ()
    if arg.kind == "bundled":
        assert arg.bundled is not None, "a bundled argument has its bundled model"
        if _looks_like_repo_id(arg.text):
            hf_id = arg.text  # the id the user named, as engines load it
        else:
            hf_id = arg.bundled.repo_ids[0] if arg.bundled.repo_ids else None
    elif arg.kind == "hub":
        hf_id = arg.text
    elif arg.kind == "variant":
        assert arg.bundled is not None, "a variant argument has its bundled model"
        hf_id = arg.text
        notes = (note("variant-resolved", repo_id=hf_id, alias=arg.bundled.alias),)
    else:  # a local path: the output names the file it read, and what it was read instead of
        notes = (note("model-path", path=clean(source), instead_of=arg.instead_of),)
    spec = spec._replace(hf_id=hf_id, source=source, notes=notes + quant_file + spec.notes)
    if checkpoint:
        spec = attach_checkpoint(spec, source)
    return spec


def attach_checkpoint(spec, source: str):
    """The checkpoint's safetensors headers, when they can be read, become the weight bytes
    (kvplan.formulas.weights compares them with the config's count where they are used)."""
    found = None
    if source.startswith("hub:"):
        from kvplan.inputs.hub import deadline_s, hub_checkpoint

        found = hub_checkpoint(spec.hf_id, spec.num_layers, deadline_s())
        if found is None:
            return spec._replace(
                notes=spec.notes + (note("checkpoint-unread", repo_id=spec.hf_id),)
            )
    elif not source.startswith(("bundled:", "variant:")):
        from kvplan.inputs.checkpoint import local_checkpoint  # a bundled config has no checkpoint

        found = local_checkpoint(Path(source).parent, spec.num_layers)
    if found is None:
        return spec
    weights = note(
        "checkpoint-weights",
        source=found.source,
        tensors=found.num_tensors,
        text_bytes=found.text_bytes,
        vision_bytes=found.vision_bytes,
        skipped_bytes=found.skipped_bytes,
    )
    return spec._replace(stored=found, notes=(*spec.notes, weights))
