"""Record SGLang 0.5.14's own DeepSeek-V4 pool sizes (Flash, Pro), as a test oracle.

SGLang needs a CUDA stack to serve, but its pool arithmetic is plain Python: this script imports
`sglang.srt.model_executor.pool_configurator` from the released wheel and runs it on a CPU.

    pip download sglang==0.5.14 --no-deps -d /tmp/sgl && unzip -q /tmp/sgl/*.whl -d /tmp/sgl/src
    pip install --target /tmp/sgl/deps dill orjson
    PYTHONPATH=/tmp/sgl/src:/tmp/sgl/deps /tmp/v032/bin/python scripts/record_sglang_dsv4_pools.py

(/tmp/v032 is a venv with torch and transformers; any such Python serves.) Packages the import
chain names but this arithmetic never calls (IPython, torchvision, sentencepiece,
compressed_tensors, gguf) are stubbed; transformers' availability checks run before the stubs,
and SGLang's config registrations may replace a newer transformers' own (exist_ok). The server
defaults come from SGLang's `apply_deepseek_v4_defaults` (CUDA: page 256, fp8_e4m3, 256 running
requests, swa_full_tokens_ratio 0.1), the model geometry as `ModelConfig` derives it for
deepseek_v4 (srt/configs/model_config.py:777-782: qk_nope = head_dim - qk_rope_head_dim,
window_size = sliding_window, compress_ratios of layers [0, num_hidden_layers) at PP 1), and
`DSV4PoolConfigurator.calculate_pool_sizes` splits each memory size. Written to
tests/data/sglang_dsv4_pools/<version>.json; tests/test_sglang_dsv4.py checks kvplan against it.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.abc
import importlib.machinery
import json
import sys
import types
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "data" / "sglang_dsv4_pools"
GIB = 1 << 30
STUBS = {"IPython", "torchvision", "sentencepiece", "compressed_tensors", "gguf"}
# (bundled config, pool memory in GiB)
CASES = [
    ("DeepSeek-V4-Flash", 60),
    ("DeepSeek-V4-Flash", 20.5),
    ("DeepSeek-V4-Pro", 60),
    ("DeepSeek-V4-Pro", 100),
]


class _Any:
    """Whatever a stubbed package is asked for (never reached by the pool arithmetic)."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return _Any()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Any()

    def __mro_entries__(self, bases):
        return (object,)

    def __getitem__(self, key):
        return _Any()

    def __or__(self, other):
        return self

    def __iter__(self):
        return iter(())

    def __bool__(self):
        return False


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Any()


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in STUBS:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def import_sglang():
    import transformers.models.auto.processing_auto  # noqa: F401  (availability before stubs)
    from transformers import AutoConfig, AutoImageProcessor, AutoProcessor, AutoTokenizer

    for auto in (AutoConfig, AutoProcessor, AutoTokenizer, AutoImageProcessor):
        register = auto.register
        auto.register = (lambda reg: lambda *a, **k: reg(*a, **{**k, "exist_ok": True}))(register)
    sys.meta_path.append(_StubFinder())
    import sglang

    pools = importlib.import_module("sglang.srt.model_executor.pool_configurator")
    hook = importlib.import_module("sglang.srt.arg_groups.deepseek_v4_hook")
    server = importlib.import_module("sglang.srt.server_args")
    return sglang.__version__, pools, hook, server


def server_defaults(hook, server) -> SimpleNamespace:
    """`sglang serve` with no flags on CUDA, through apply_deepseek_v4_defaults."""
    args = SimpleNamespace(
        attention_backend=None,
        page_size=server.ServerArgs.page_size,
        kv_cache_dtype="auto",
        device="cuda",
        max_running_requests=None,
        speculative_algorithm=None,
        swa_full_tokens_ratio=server.ServerArgs.swa_full_tokens_ratio,
        moe_runner_backend="auto",
        get_model_config=lambda: SimpleNamespace(nvfp4_moe_meta=None),
    )
    hook.apply_deepseek_v4_defaults(args, "DeepseekV4ForCausalLM")
    return args


def model_runner(name: str, args: SimpleNamespace) -> SimpleNamespace:
    raw = json.loads((REPO / "model_configs" / f"{name}.json").read_text())
    layers = raw["num_hidden_layers"]
    config = SimpleNamespace(  # ModelConfig for deepseek_v4 (model_config.py:777-782)
        qk_rope_head_dim=raw["qk_rope_head_dim"],
        qk_nope_head_dim=raw["head_dim"] - raw["qk_rope_head_dim"],
        window_size=raw["sliding_window"],
        index_head_dim=raw["index_head_dim"],
        compress_ratios=raw["compress_ratios"],
    )
    return SimpleNamespace(
        model_config=config,
        start_layer=0,
        end_layer=layers,
        pp_size=1,
        server_args=SimpleNamespace(
            swa_full_tokens_ratio=args.swa_full_tokens_ratio,
            speculative_algorithm=args.speculative_algorithm,
            max_speculative_num_draft_tokens=None,
        ),
        enable_hisparse=False,
        spec_algorithm=SimpleNamespace(is_none=lambda: True, is_eagle=lambda: False),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"folder (default {OUT})")
    out = parser.parse_args().out
    version, pools, hook, server = import_sglang()
    args = server_defaults(hook, server)
    records = []
    for name, gib in CASES:
        configurator = pools.DSV4PoolConfigurator(model_runner(name, args))
        memory = int(gib * GIB)
        config = configurator.calculate_pool_sizes(memory, args.page_size)
        records.append(
            {
                "model": name,
                "available_bytes": memory,
                "page_size": args.page_size,
                "swa_full_tokens_ratio": args.swa_full_tokens_ratio,
                "kv_cache_dtype": args.kv_cache_dtype,
                "max_running_requests_default": args.max_running_requests,
                "bytes_per_full_token": configurator.bytes_per_full_token,
                "full_tokens": config.full_max_total_num_tokens,
                "swa_tokens": config.swa_max_total_num_tokens,
                "c4_tokens": config.c4_max_total_num_tokens,
                "c128_tokens": config.c128_max_total_num_tokens,
                "c4_state_pool_size": config.c4_state_pool_size,
                "c128_state_pool_size": config.c128_state_pool_size,
                "layers": configurator.num_layers_total,
                "c4_layers": configurator.num_layers_ca4,
                "c128_layers": configurator.num_layers_ca128,
            }
        )
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{version}.json"
    payload = {
        "sglang_version": version,
        "command": f"python scripts/record_sglang_dsv4_pools.py  (SGLang {version})",
        "cases": records,
    }
    path.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"{path}: {len(records)} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
