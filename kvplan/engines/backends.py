"""The engines' kernel-backend flags as one record (Backends), and which engine and release
takes each flag: a flag is accepted where the engine's argument parser at that release takes it
and refused elsewhere as one line, never read as the other engine's.

The releases, from the engines' own argument parsers (vLLM engine/arg_utils.py and
config/attention.py, SGLang srt/server_args.py, read release by release):

- `--attention-backend`: vLLM from 0.13 (vllm#26315; before, vLLM read the
  VLLM_ATTENTION_BACKEND environment variable), its value `auto` from 0.18 (vllm#35738; 0.13 to
  0.17 look the name up in AttentionBackendEnum, where there is none); every SGLang release.
- `--prefill-attention-backend`, `--decode-attention-backend`: SGLang from 0.4.9.post5.
- `--nsa-prefill-backend`, `--nsa-decode-backend`: SGLang from 0.5.4.
- `--moe-backend`: vLLM from 0.17 (config/kernel.py KernelConfig.moe_backend).
- `--moe-runner-backend`: SGLang 0.5 (the first 0.5 release on PyPI, 0.5.1, has it; 0.4.10 not).
"""

from __future__ import annotations

from kvplan.engines.releases import older_than
from kvplan.errors import KvplanError
from kvplan.record import NamedTuple

ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang"}


class Backends(NamedTuple):
    """The kernel-backend flags as typed (None: not given, the engine's own choice), one field
    a flag, named as its engine spells it (`--` + the name with hyphens)."""

    attention_backend: str | None = None  # vLLM's and SGLang's --attention-backend
    prefill_attention_backend: str | None = None  # SGLang's per-phase choices
    decode_attention_backend: str | None = None
    nsa_prefill_backend: str | None = None  # SGLang, DeepSeek sparse attention models
    nsa_decode_backend: str | None = None
    moe_backend: str | None = None  # vLLM's --moe-backend
    moe_runner_backend: str | None = None  # SGLang's --moe-runner-backend

    def moe(self, engine: str) -> str | None:
        """The MoE kernels named for `engine`, in its own flag (check_backends refuses the
        other engine's)."""
        return getattr(self, moe_field(engine))

    def given(self, attention: bool = True, moe: bool = True) -> list[tuple[str, str]]:
        """(flag, value) of every flag given, in the record's order, as the engines spell them;
        `attention`, `moe`: which of the two families."""
        return [
            (flag_of(name), value)
            for name, value in zip(self._fields, self, strict=True)
            if value is not None and (moe if name in MOE_FIELDS else attention)
        ]


ATTENTION_FIELDS = Backends._fields[:5]
MOE_FIELDS = Backends._fields[5:]

# each flag: {engine: the first release that takes it} (the module's docstring gives the sources)
FIRST_RELEASE: dict[str, dict[str, str]] = {
    "attention_backend": {"vllm": "0.13", "sglang": "0.1"},
    "prefill_attention_backend": {"sglang": "0.4.9.post5"},
    "decode_attention_backend": {"sglang": "0.4.9.post5"},
    "nsa_prefill_backend": {"sglang": "0.5.4"},
    "nsa_decode_backend": {"sglang": "0.5.4"},
    "moe_backend": {"vllm": "0.17"},
    "moe_runner_backend": {"sglang": "0.5"},
}
# vLLM --attention-backend values newer than the flag, lower case: the first release taking
# each (auto: config/attention.py; a name: AttentionBackendEnum in attention/backends/registry.py)
VLLM_NAME_FROM = {"auto": "0.18", "flashinfer_mla_sparse": "0.17"}
# what an engine read before its release took the flag
BEFORE = {
    ("vllm", "attention_backend"): "; vLLM read the VLLM_ATTENTION_BACKEND environment variable, "
    "which kvplan does not take",
    ("vllm", "moe_backend"): "; vLLM chose its MoE kernels by VLLM_* environment variables, "
    "which kvplan does not take",
    ("sglang", "moe_runner_backend"): "; 0.4 chose its MoE kernels with --enable-ep-moe, "
    "--enable-deepep-moe and --enable-flashinfer-*-moe flags, which kvplan does not take",
}


def moe_field(engine: str) -> str:
    """The Backends field of `engine`'s MoE kernel flag."""
    return "moe_runner_backend" if engine == "sglang" else "moe_backend"


def flag_of(name: str) -> str:
    """A Backends field as the engine spells the flag: '--moe-runner-backend'."""
    return "--" + name.replace("_", "-")


def check_backends(backends: Backends, engine: str, version: str) -> None:
    """Refuse, as one line, every given flag that `engine` at release `version` (as typed) does
    not take: the other engine's flag, naming whose it is; a flag newer than the release, naming
    the release it came with; a vLLM backend name newer than the release (VLLM_NAME_FROM)."""
    if engine not in ENGINE_NAMES:
        given = backends.given()
        if given:
            raise KvplanError(f"{given[0][0]} is a vLLM/SGLang flag; {engine} takes none")
        return
    name_of = ENGINE_NAMES[engine]
    for name, value in zip(backends._fields, backends, strict=True):
        if value is None:
            continue
        first = FIRST_RELEASE[name]
        if engine not in first:
            (owner,) = first
            instead = (
                f"spells it {flag_of(moe_field(engine))}"
                if name in MOE_FIELDS
                else "takes one --attention-backend"
            )
            raise KvplanError(f"{flag_of(name)} is {ENGINE_NAMES[owner]}'s; {name_of} {instead}")
        if older_than(version, first[engine]):
            raise KvplanError(
                f"{flag_of(name)}: {name_of} {str(version)[:20]} has no such flag (it came with "
                f"{first[engine]}){BEFORE.get((engine, name), '')}"
            )
    attention = str(backends.attention_backend).lower()
    if engine == "vllm" and attention in VLLM_NAME_FROM:
        first_name = VLLM_NAME_FROM[attention]
        if older_than(version, first_name):
            raise KvplanError(
                f"--attention-backend {backends.attention_backend}: vLLM {str(version)[:20]} has "
                f"no such backend (it came with {first_name})"
                + ("; leave the flag out for vLLM's own choice" if attention == "auto" else "")
            )
