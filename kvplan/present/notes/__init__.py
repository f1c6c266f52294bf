"""The words of every note, keyed by its id: the one home of each assumption's text.

The library creates `Note(id, values)` with numbers in SI units where it makes an assumption; the
words live here, one module per family of notes, each family beside the subsystem that makes its
notes (its ids share a prefix). A family registers its words in `registry.TEXTS` when imported,
and a family is imported only when one of its notes is printed (start-up: a command imports the
families of the notes it prints, no other).

The families, each named for the subsystem that makes its notes (FAMILIES below gives the id
prefixes of each; docs/architecture.md has the same map):

- `architecture`: the model as read from its config (kvplan/inputs/architectures/)
- `sources`: where the model came from: path, variant, quantization, checkpoint, GGUF
  (kvplan/inputs/sources.py, quantization.py, gguf.py; checkpoint-differs in formulas/weights.py)
- `formats`: KV-cache and weight storage formats (kvplan/dtypes.py, kvplan/formulas/weights.py)
- `size`: the model at a layout (kvplan/plans/common.py, size.py)
- `capacity`: budget, paging, replicas, KV transfer, deployments (kvplan/plans/capacity.py,
  deployment.py, common.py)
- `compare`, `catalog`, `explore`, `roofline`, `whatif`, `plan`: their commands'
  (kvplan/plans/compare.py, catalog.py and gpus.py, explore.py, roofline.py, whatif.py, plan.py)
- `engines`: what every engine shares (kvplan/engines/vllm.py, sglang.py, max_len.py)
- `vllm`, `sglang`: each engine's allocation (kvplan/engines/vllm.py, sglang.py)
- `llamacpp`: llama.cpp, Ollama and kvplan fit (kvplan/engines/llamacpp.py, ollama.py,
  kvplan/plans/fit.py)
- `simulate`: the simulator (kvplan/plans/simulate.py, kvplan/simulate/setup.py)
- `measure`: kvplan measure (kvplan/measure/run.py, distributed.py)

An id belongs to the family of its longest prefix in FAMILIES (whole words: `tp-crosses-nodes`
is capacity's, `tp-per-gpu` size's). tests/test_notes.py checks that every registered id is
registered by the family the table names and that no id is registered twice; the design report
cites notes by id."""

from collections.abc import Callable, Iterable
from importlib import import_module

from kvplan.notes import Note
from kvplan.present.notes.registry import TEXTS

# family module -> the id prefixes (whole words) of its notes; the list above says where each
# family's notes are made
FAMILIES: dict[str, tuple[str, ...]] = {
    "architecture": (
        "no", "llama4", "vision", "compressed", "expert", "mtp", "mla", "falcon", "attention",
        "structure", "gqa", "indexer", "tie",
    ),
    "sources": ("model", "variant", "quant", "checkpoint", "gguf"),
    "formats": ("kv", "weights"),
    "size": ("tp", "state", "sliding", "ctx"),
    "capacity": (
        "capacity", "memory", "transfer", "deployment", "gpus-idle", "launch", "node",
        "tp-crosses", "pp", "dp",
    ),
    "compare": ("compare",),
    "catalog": ("models", "gpus"),
    "explore": ("explore",),
    "roofline": ("roofline",),
    "whatif": ("whatif",),
    "engines": ("engine",),
    "vllm": ("vllm",),
    "sglang": ("sglang",),
    "llamacpp": ("llamacpp", "ollama", "fit"),
    "simulate": ("sim",),
    "plan": ("plan",),
    "measure": ("measure", "check", "distributed"),
}  # fmt: skip
_FAMILY_OF_PREFIX = {prefix: family for family, prefixes in FAMILIES.items() for prefix in prefixes}


def family(note_id: str) -> str:
    """The family module that holds `note_id`'s words: its longest prefix of whole words in
    FAMILIES (KeyError for an id no family claims)."""
    words = note_id.split("-")
    for count in range(len(words), 0, -1):
        found = _FAMILY_OF_PREFIX.get("-".join(words[:count]))
        if found is not None:
            return found
    raise KeyError(note_id)


def note_text(item: Note) -> str:
    words = TEXTS.get(item.id)
    if words is None:  # its family's first note: import the family (it registers its texts)
        import_module(f"{__name__}.{family(item.id)}")
        words = TEXTS[item.id]
    return words(**dict(item.values))


def all_texts() -> dict[str, Callable[..., str]]:
    """Every note's text, every family imported."""
    for name in FAMILIES:
        import_module(f"{__name__}.{name}")
    return TEXTS


def note_texts(items: Iterable[Note]) -> list[str]:
    """Texts in order, repeats dropped (two notes may read the same)."""
    out: list[str] = []
    for item in items:
        words = note_text(item)
        if words not in out:
            out.append(words)
    return out
