"""The engine releases kvplan models, and the one each command takes when none is given: every
default release (`kvplan engine`, `simulate`, `plan`, `launch`'s image) is read from here, and
the readings of a release as given every release rule uses (release_parts, on
kvplan.release.release_key).

The rules that differ between releases stay with their engine (kvplan/engines/vllm.py,
sglang.py), keyed by these names. A release kvplan does not know runs with the rules of the
nearest one it knows, and says so (notes sim-sglang-version-nearest, sim-vllm-version-newer): a
release's own patches are compared with the first patch of each rule, a release given without
its patch ('0.5', '0.11') runs its newest rules (release_key: NEWEST), and so does a later release run
with an earlier one's rules (SGLang 0.6 with 0.5's, kvplan.engines.sglang.sglang_rules); an
earlier one runs its neighbour's first rules. vLLM's rules are each "from release X", so a
release between two known ones takes every rule of the releases before it.
"""

from kvplan.release import (  # the one reading of a release (shared layer)
    NEWEST,
    release_key,
)

# vLLM: the releases whose allocator kvplan models. 0.21: CUDA-graph memory subtracted, new
# cache-size line; 0.32: the start-up fit check and the max-length estimate plan against the
# memory less the null block BlockPool holds back
VLLM_VERSIONS = ("0.19", "0.21", "0.32")
VLLM_VERSION = "0.19"  # the default: the release kvplan's start-up memory fit was made on

# SGLang: the releases whose server defaults kvplan models (docs/simulate.md states each one's):
# 0.4 (server_args.py ServerArgs.__post_init__ of each 0.4 wheel): mem_fraction_static,
#     chunked_prefill_size and cuda_graph_max_bs by patch (kvplan.engines.sglang_04: a TP table
#     before 0.4.7.post1, a reserved-memory bucket from it; a bare 0.4 is 0.4.10.post2);
# 0.5 (main of April 2026): the memory-bucket heuristic of default_mem_fraction.
SGLANG_VERSIONS = ("0.4", "0.5")
SGLANG_VERSION = "0.5"  # the default


def release_parts(version: str) -> tuple[int, int, int | None] | None:
    """'0.8' -> (0, 8, None), '0.8.4', '0.8.4.post1' and '0.8.4rc1' -> (0, 8, 4); None for what
    no release spells (release_key)."""
    key = release_key(version)
    if key is None:
        return None
    return key[0], key[1], None if key[2] == NEWEST else key[2]


def prerelease(version: str) -> bool:
    """Whether `version` is a release candidate or dev build ('0.5.9rc0', '0.5.9.dev0'):
    release_key orders it before its release, yet every rule reads its patch as the
    release's (release_parts), so it runs that release's rules (note sim-version-prerelease)."""
    key = release_key(version)
    return key is not None and key[2] != NEWEST and key[3] < 0


def release_minor(version: str) -> tuple[int, int] | None:
    """'0.13' or '0.19.1' -> (0, 13); None for what no release spells."""
    key = release_key(version)
    return None if key is None else key[:2]


def older_than(version: str, first: str) -> bool:
    """Whether release `version` (as typed) came before `first`: a whole line ('0.13') where
    `first` names one, else the release itself; False for a version that is no release."""
    given, threshold = release_key(version), release_key(first)
    if given is None or threshold is None:
        return False
    depth = 2 if threshold[2] == NEWEST else 4
    return given[:depth] < threshold[:depth]


def allocation_release(version: str) -> str:
    """The release whose allocator rules apply to vLLM `version` ("0.24.1"): the newest release
    kvplan models that is not newer than it, 0.19's for anything older (the allocator kvplan
    checked on 0.19.1 is the one V1 had since 0.8). `kvplan engine` takes only the releases
    themselves; `simulate` runs any version it takes on its nearest allocator."""
    given = release_minor(version) or (0, 0)
    known = [r for r in VLLM_VERSIONS if (release_minor(r) or (0, 0)) <= given]
    return known[-1] if known else VLLM_VERSIONS[0]
