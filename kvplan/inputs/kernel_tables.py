"""The measured kernel rates a step model runs at, per GPU and engine: data files, not literals.

kvplan/data/kernel_tables/<gpu>.<engine>.<version>.json each hold what `Achieved` holds (the
fractions of the datasheet rates an engine's kernels reach, the fused-MoE curve, the all-reduce
call cost, the small-shape floor of each kernel family) with their provenance (`source`,
`derived_by`: scripts/derive_achieved.py --write-tables); where measured, the DSA-minus-MLA
module grids are in dsa/ under the same name (nine tenths of the bytes: read only for a model
with DSA layers; each file's `shape` the attention shape its stand-in's modules ran, its `shapes`
the other shapes' grids), each fused-MoE shape's time by tokens in moe/ (read only for a MoE model),
each attention backend's own kernels in attention/ (read only where a flag names a backend:
`attention_backends`), each GEMM shape's time at 1-32,768 tokens in gemm/ (`gemm_grid`), each
Gated DeltaNet layer's kernels by head shape, phase and batch in recurrent/ (`recurrent_grid`).
host_overheads.json holds the per-step, per-request and per-layer host costs.

Those grids are measured times, not fractions: one rule (KernelTables.grids_hold) says where
they stand. On the GPU's own tables for the simulated engine, yes; on a borrowed GPU's tables
only where the profile's datasheet rates are the lender's (same_silicon: the H800 on the H100
SXM's), since an H100's GEMM time is not an H100 NVL's nor an A100's an A10G's; elsewhere the
fractions alone transfer. An attention backend this GPU has no rows of, for a kind of
attention, is borrowed from a GPU of its vendor that has them (transfer.json,
scripts/derive_transfer.py: the lender's calls times this GPU's time over the lender's, fitted
on the calls both timed of the same backend's other kind; `borrowed_backends`), never in place
of its own rows; a run using one is in the "borrowed" interval class
(kvplan.plans.intervals.raw_class).

A profile names its tables in one field, never by its name:

    kernel_tables: {vllm: h100_sxm, sglang: h100_sxm}   # its own, per engine
    kernel_tables: {borrowed: h100_sxm}                 # another GPU's (H800: the H100's)

and a profile without the field runs at the H100 SXM's vLLM fractions on its own datasheet
rates. A GPU with no tables but some public kernel-level measurements names them:

    kernel_tables: {partial: mi300x}                    # partial/mi300x.json

and runs at the H100's fractions with the measured figures in their place (dense memory and
compute fractions, floors, the all-reduce call, the fused-MoE curve): still evidence
"datasheet" (its interval class), the sim-kernel-tables note naming what was measured and where.
`tables_for` says which it got: evidence "own" (this GPU, this engine), "other-engine" (this
GPU, the other engine's tables: none for the simulated one), "borrowed" (another GPU's, named by
the profile), "datasheet" (no tables: the H100's).
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

from kvplan.curves import curve_time_s, curve_value
from kvplan.errors import KvplanError
from kvplan.record import NamedTuple
from kvplan.release import NEWEST, release_key

FOLDER = Path(__file__).resolve().parent.parent / "data" / "kernel_tables"
DSA_FOLDER = FOLDER / "dsa"
DSA_EAGER_FOLDER = FOLDER / "dsa_eager"  # SGLang's DSA decode module timed outside a CUDA graph
MOE_FOLDER = FOLDER / "moe"
GEMM_FOLDER = FOLDER / "gemm"
ATTENTION_FOLDER = FOLDER / "attention"
RECURRENT_FOLDER = FOLDER / "recurrent"
TRANSFER_FILE = FOLDER / "transfer.json"  # scripts/derive_transfer.py: borrowed backends
PARTIAL_FOLDER = FOLDER / "partial"  # kernel-level measurements of a GPU without tables
ENGINES = ("vllm", "sglang")
DATASHEET_TABLES = "h100_sxm"  # a GPU without tables runs at the H100's fractions
DATASHEET_VERSION = "0.14.0"  # ... of vLLM 0.14.0 (the tables kvplan's goldens were made with)
EVIDENCE = ("own", "other-engine", "borrowed", "datasheet")
ENGINE_WORDS = {"vllm": "vLLM", "sglang": "SGLang"}
# the grid families read by the properties of KernelTables (moe/ and dsa/ by its fields)
GRID_FOLDERS = {"gemm": GEMM_FOLDER, "attention": ATTENTION_FOLDER, "recurrent": RECURRENT_FOLDER}
GRID_WORDS = {
    "gemm": "GEMM shapes",
    "attention": "attention backends",
    "moe": "fused-MoE shapes",
    "dsa": "DSA modules",
    "recurrent": "Gated DeltaNet layers",
}
_FILE = re.compile(r"^([a-z0-9_]+)\.([a-z]+)\.([0-9][0-9a-z.]*)\.json$")


class Achieved(NamedTuple):
    """Fractions of a profile's rates an engine's kernels reach: (compute, memory) pairs, the
    compute side of the dense peak in the kernel's dtype, the memory side of the bandwidth."""

    dense: dict  # weights format -> GEMMs of the attention, MLP, embedding and head weights
    experts: dict  # weights format -> fused-MoE expert GEMMs (formats without a curve)
    attention: tuple[float, float]  # FlashAttention: prefill FLOPs, decode KV reads
    mla: tuple[float, float]  # MLA prefill FLOPs, decode latent reads
    allreduce_call_s: float  # a TP all-reduce of a small message
    link: float  # all-reduce bus bandwidth / one direction of the link
    # weights format -> ((tokens per expert, slowdown), ...): the fused-MoE kernel's time over
    # the datasheet roofline max(touched expert bytes / BW, FLOPs / peak), by the tokens each
    # expert gets (tokens x top-k / experts). One pair of fractions cannot hold it: the kernel
    # reaches ~0.9 of the bandwidth at 1-4 tokens per expert, neither roof at 64-512, and its
    # compute plateau (0.2-0.3 of peak) only from ~256.
    experts_curve: dict
    source: str  # the tables it was derived from
    # op family (gemm, moe, attention, allreduce) -> the smallest time a kernel of it took at 1-16
    # tokens (seconds): the step model charges each launch at least this; {}: none measured
    floors_s: dict = {}
    # NCCL's all-gather of a small message over the TP group (the head's logits gather);
    # None: the all-reduce call's (a file derived before it was recorded)
    allgather_call_s: float | None = None
    # GPUs in the group -> ((message bytes, seconds), ...): the engine's graph-mode all-reduce
    # as the table times it at that count, smallest message first; {}: timed at one count and
    # size only (allreduce_call_s and link)
    allreduce_curve_s_by_gpus: dict = {}

    def _allreduce_curve(self, ranks: int) -> tuple:
        """The measured curve of the smallest GPU count the table timed that holds the group (a
        one-shot all-reduce reads from every peer, so its latency grows with the group: SGLang
        0.5.14 on a GB300 3.8 us at 4 GPUs, 26.9 us at 8), the largest count's above it; ()
        where none was timed."""
        if not self.allreduce_curve_s_by_gpus:
            return ()
        counts = sorted(self.allreduce_curve_s_by_gpus)
        holds = [c for c in counts if c >= ranks]
        return self.allreduce_curve_s_by_gpus[holds[0] if holds else counts[-1]]

    def allreduce_call_s_at(self, ranks: int) -> float:
        """One small all-reduce over `ranks` GPUs: the smallest message of _allreduce_curve,
        allreduce_call_s where the table timed no count."""
        curve = self._allreduce_curve(ranks)
        return curve[0][1] if curve else self.allreduce_call_s

    def allreduce_s(self, message_bytes: float, ranks: int) -> float | None:
        """One all-reduce of `message_bytes` over `ranks` GPUs of one node, read off the measured
        curve at its size (curve_time_s: the 2-point ring of the smallest call and the largest
        message's bus rate is 1.4-1.8x too fast between 128 KB and 8 MB, the decode steps'
        messages); None where the table has no curve."""
        curve = self._allreduce_curve(ranks)
        return curve_time_s(curve, message_bytes) if curve else None


class DsaGrids(NamedTuple):
    """A DSA module (DeepSeek-V3.2's, the stand-in; `others`: those of other attention shapes
    the same tables timed) less what a layer costs without it (`baseline`), microseconds per
    layer: per (phase, heads on a rank, kv dtype), rows follow batches[phase], columns
    lengths[phase]."""

    batches: dict  # phase -> (batch, ...)
    lengths: dict  # phase -> (length, ...)
    delta_us: dict  # (phase, heads, kv dtype) -> ((us, ...), ...)
    engine_version: str  # the engine version the module tables were measured on
    # the attention shape the modules ran (kvplan.anatomy.model.Attention's field names:
    # qk_head_dim, v_head_dim, mla_kv_lora_rank, mla_q_lora_rank, indexer_head_dim,
    # indexer_num_heads, indexer_topk): the grids time layers of this shape only
    shape: dict = {}
    # what the module's time is taken less: "mla_module" (DeepSeek-V3's dense MLA module in the
    # same engine), "kvplan_layer" (kvplan's own price of the layer without the module:
    # batch_step.dsa_layer_base_s, from the engine's own GEMM, MLA-kernel and mla_bmm rows)
    baseline: str = "mla_module"
    # SGLang's --nsa-decode-backend each kv dtype's decode grids timed ("fp8" -> ("trtllm",));
    # {}: not recorded (vLLM's files: no such flag)
    decode_kernels: dict = {}
    # the grids of the other attention shapes the same module tables timed (the file's
    # "shapes": GLM-5's in SGLang's), each with no `others` of its own; the step model reads
    # the one whose shape its DSA layers have (batch_step.dsa_grids_for)
    others: tuple = ()
    # "kvplan_layer" only: the release of the tables the baseline was priced on (the file's
    # name's, scripts/derive_achieved.py write_dsa_grids) where it is not the run's own tables'
    # (KernelTables.dsa_delta_us); the run adds the delta to its own layer price, so the step
    # charges the module row only on the same tables (batch_step: an untimed part). None: the
    # run's own tables, or an "mla_module" baseline (no kvplan price in it)
    base_release: str | None = None


class DsaEager(NamedTuple):
    """SGLang's DSA decode module (DeepSeek-V3.2's) per layer on one rank as aiconfigurator's
    collector timed it outside a CUDA graph (`eager`: the batches above the server's
    cuda_graph_max_bs) and in one (`graph`: the two largest batches below), dsa_eager/ files
    (scripts/derive_achieved.py dsa_eager_rows): per (heads on a rank, kv dtype) ->
    {batch: ((tokens held, microseconds), ...)}."""

    engine_version: str  # the SGLang release the module rows were measured on
    graph: dict
    eager: dict
    # the rows' release where it is not the tables' own (KernelTables.dsa_eager, the rule
    # KernelTables.dsa_delta_us applies to its baseline): they stand in for the run's release,
    # an untimed part (batch_step.StepModel.untimed_parts). None: the tables' own release
    stands_in_from: str | None = None


class GemmGrid(NamedTuple):
    """A GPU's measured GEMMs by shape (gemm/ files, scripts/derive_achieved.py gemm_grid):
    us[fmt][i][j][l] the microseconds of m[i] tokens through an n[j] x k[l] weight in kernel-table
    format `fmt` (None: not timed)."""

    m: tuple[int, ...]
    n: tuple[int, ...]
    k: tuple[int, ...]
    us: dict
    # MLA's absorbed BMMs (the file's "mla_bmm": derive_achieved.py mla_bmm_grid): bmm_us[fmt]
    # [op][i][j] the microseconds of op "pre" or "post" over m[i] tokens and bmm_heads[j] heads
    # of the table's DeepSeek slice (None: not timed); empty: the table has no bf16 BMM rows
    bmm_heads: tuple[int, ...] = ()
    bmm_us: dict | None = None


class RecurrentGrid(NamedTuple):
    """A GPU's measured recurrent-layer kernels (recurrent/ files, scripts/derive_achieved.py
    recurrent_grid): decode[key][i] the microseconds of one layer's decode kernels at
    decode_batch[i] sequences, prefill[key][i][j] those of its prefill kernels at
    prefill_batch[i] sequences of prefill_tokens[j] tokens each (None: not timed); key
    "<state kind>/<key heads>x<key dim>/<value heads>x<value dim>", the heads on one rank."""

    decode_batch: tuple[int, ...]
    prefill_batch: tuple[int, ...]
    prefill_tokens: tuple[int, ...]
    decode: dict
    prefill: dict
    source: str


class KernelTables(NamedTuple):
    """The tables one run uses, with where they came from."""

    achieved: Achieved
    dsa_file: str | None  # the DSA module grids' file in DSA_FOLDER (None: none for this run)
    # the per-shape fused-MoE curves' file in MOE_FOLDER (None: none, or not this GPU's kernels)
    moe_file: str | None
    evidence: str  # one of EVIDENCE
    borrowed_from: str | None  # the tables' GPU where it is not the profile's
    source: str  # the data file's provenance
    gpu: str  # the tables' GPU key ("h100_sxm")
    name: str  # the tables' GPU, in words ("H100 SXM")
    engine: str  # the engine the tables measured
    engine_version: str
    asked_version: str | None  # the version asked for (None: the newest there is)
    # what of a datasheet GPU's figures are its own kernel-level measurements, in words ("": none)
    measured: str = ""
    # whether the tables' absolute kernel times (the dsa/, moe/, attention/, gemm/ and
    # recurrent/ grids) hold on the profile's GPU: on its own tables, and on a borrowed GPU's
    # whose datasheet rates are the borrowing profile's (same_silicon); elsewhere they time
    # another GPU, and only the fractions of the datasheet rates transfer
    grids_hold: bool = True

    @property
    def dsa_delta_us(self) -> DsaGrids | None:
        """The DSA module grids, read on first use (None: none for this run); `base_release`
        set where their baseline was priced on another release's tables than this run's."""
        if self.dsa_file is None:
            return None
        grids = _dsa(self.dsa_file)
        drawn_on = self._other_release(self.dsa_file)
        if grids.baseline != "kvplan_layer" or drawn_on is None:
            return grids
        others = tuple(o._replace(base_release=drawn_on) for o in grids.others)
        return grids._replace(base_release=drawn_on, others=others)

    def _other_release(self, name: str) -> str | None:
        """The release of this GPU and engine's grid file `name` where it is not these tables'
        own (grid_file's nearest release), None where it is: the one rule by which a grid
        family's rows are another release's."""
        release = _file_version(name, self.gpu, self.engine)
        return None if release == self.engine_version else release

    @property
    def dsa_eager(self) -> DsaEager | None:
        """SGLang's DSA decode module timed outside a CUDA graph on this GPU (the dsa_eager/
        file of the release nearest these tables'), read where the run reads DSA module grids
        (dsa_file) on SGLang's tables; None elsewhere or where none was timed. `stands_in_from`
        set where that release is not the tables' own."""
        if self.dsa_file is None or self.engine != "sglang":
            return None
        name = grid_file(DSA_EAGER_FOLDER, self.gpu, self.engine, self.engine_version)
        if name is None:
            return None
        return _dsa_eager(name)._replace(stands_in_from=self._other_release(name))

    @property
    def moe_curves_s(self) -> dict:
        """moe_shape_key -> ((tokens, seconds), ...), read on first use ({}: none for this
        run): the moe_file's, and a format its release timed no shape of (SGLang 0.5.9's B200
        table has no MXFP4 rows) the nearest release's that did (moe_formats_elsewhere)."""
        if self.moe_file is None:
            return {}
        return _moe_curves_by_format(self.gpu, self.engine, self._moe_version)[0]

    @property
    def _moe_version(self) -> str:
        return _file_version(str(self.moe_file), self.gpu, self.engine)

    def moe_formats_elsewhere(self) -> dict:
        """fused-MoE format ("mxfp4") -> the release whose rows moe_curves_s holds for it, for
        the formats the moe_file's release did not time ({}: none, or no moe_file)."""
        if self.moe_file is None:
            return {}
        return _moe_curves_by_format(self.gpu, self.engine, self._moe_version)[1]

    @property
    def attention_backends(self) -> dict:
        """(kind, backend) -> BackendTiming of this GPU and engine's per-backend attention
        kernels, read on first use ({}: none measured, or not this GPU's and engine's); a
        backend of a kind the GPU has no rows of but another GPU of its vendor has, with a
        ratio fitted on the rows both have (borrowed_backends), only where the GPU has none of
        its own."""
        if not self.grids_hold:
            return {}
        name = grid_file(ATTENTION_FOLDER, self.gpu, self.engine, self.engine_version)
        own = attention_backends(name) if name is not None else {}
        lent = borrowed_backends(
            self.gpu, self.engine, _borrowed_version(self.gpu, self.engine, self.engine_version)
        )
        return {**lent, **own}

    @property
    def gemm_grid(self) -> GemmGrid | None:
        """This GPU and engine's GEMMs by shape at 1-32,768 tokens, read on first use (None:
        not measured, or the grids do not hold here: grids_hold)."""
        if not self.grids_hold:
            return None
        name = grid_file(GEMM_FOLDER, self.gpu, self.engine, self.engine_version)
        return gemm_grid(name) if name is not None else None

    @property
    def recurrent_grid(self) -> RecurrentGrid | None:
        """This GPU's (or the borrowed GPU's, where grids_hold) recurrent-layer kernels as the
        simulated engine runs them, the file of that GPU and engine nearest the tables' release
        (grid_file), read on first use (None: none measured, or the grids do not hold here)."""
        if not self.grids_hold:
            return None
        name = grid_file(RECURRENT_FOLDER, self.gpu, self.engine, self.engine_version)
        return recurrent_grid(name) if name is not None else None

    def grid_versions(self) -> dict:
        """grid family ("moe", "gemm", "attention", "dsa", "recurrent") -> the release its file
        was measured on, for the families this run reads a file of (grid_file: the tables' own
        release where it has one, else the nearest release's)."""
        out = {}
        if self.moe_file is not None:
            out["moe"] = _file_version(self.moe_file, self.gpu, self.engine)
        if self.dsa_file is not None:  # the release the module rows are of (its "version")
            out["dsa"] = _dsa(self.dsa_file).engine_version
        if self.grids_hold:
            for family, folder in GRID_FOLDERS.items():
                name = grid_file(folder, self.gpu, self.engine, self.engine_version)
                if name is not None:
                    out[family] = _file_version(name, self.gpu, self.engine)
        return out

    def version_words(
        self,
        families=GRID_WORDS,
        moe_format: str | None = None,
        moe_runner: tuple[str, str | None] | None = None,
    ) -> str:
        """The releases this run's tables come from where they are not the run's own, in
        words ("SGLang 0.5.9's tables for a 0.5.7 run; Gated DeltaNet layers from 0.5.14's"),
        for the grid `families` the run reads; "" where every one is the run's own release
        (or the run named none: the newest). `moe_runner`: (the fused-MoE runner the engine
        resolves, the release whose rows of it price the model's shape: moe_runner_rows; None
        where no release timed it), named where that release is not the tables' own or none
        timed it."""
        engine = ENGINE_WORDS.get(self.engine, self.engine)
        parts = []
        asked = self.asked_version
        if known_release(asked) and release_key(str(asked)) != release_key(self.engine_version):
            parts.append(f"{engine} {self.engine_version}'s tables for a {self.asked_version} run")
        grids = self.grid_versions()
        for family in families:
            version = grids.get(family)
            if version is not None and version != self.engine_version:
                parts.append(f"{GRID_WORDS[family]} from {engine} {version}'s")
        elsewhere = self.moe_formats_elsewhere().get(moe_format or "")
        runner, timed_at = moe_runner if moe_runner is not None else (None, None)
        if "moe" in families and runner is not None and timed_at is None:
            parts.append(
                f"{engine}'s {runner} fused MoE untimed at the model's shape (no release's "
                "rows): priced on the fastest runner its tables timed"
            )
        elif "moe" in families and runner is not None and timed_at != self.engine_version:
            parts.append(f"the fused MoE as {runner} runs it from {engine} {timed_at}'s rows")
        elif "moe" in families and elsewhere is not None:
            parts.append(f"{moe_format} {GRID_WORDS['moe']} from {engine} {elsewhere}'s")
        return "; ".join(parts)

    @property
    def floors_s(self) -> dict:
        """op family -> the smallest kernel time measured (seconds; Achieved.floors_s)."""
        return self.achieved.floors_s

    @property
    def label(self) -> str:
        """ "H100 SXM, vLLM 0.14.0" """
        engine = ENGINE_WORDS.get(self.engine, self.engine)
        return f"{self.name}, {engine} {self.engine_version}"


def release_order(version: str) -> tuple:
    """The order of engine releases (the sort key of the tables' and the scripts' files):
    kvplan.release.release_key, the one reading of a release (0.5.14rc0 and 0.5.10.dev3 before
    their release, v0.5.9 and 0.5.9+cu129 as 0.5.9)."""
    key = release_key(version)
    if key is None:
        raise KvplanError(f"{version[:40]!r} is no engine release")
    return key


def known_release(version: str | None) -> bool:
    """Whether `version` names one release (major.minor.patch...: kvplan.release.release_key): a bare
    "0.5" or none names a series, whose newest tables a run takes."""
    key = None if version is None else release_key(version)
    return key is not None and key[2] != NEWEST


def nearest_version(versions: tuple, asked: str | None) -> str:
    """The measured release nearest a run's: `asked` itself where measured, else the newest at
    or below it (release_order), else the oldest (a run older than every table); the newest
    for a bare or unknown version (known_release). `versions` oldest first, not empty. The
    kernels an engine runs change by release (SGLang 0.5.9's B200 bf16 fused MoE is triton's,
    0.5.14's flashinfer_trtllm's): an older run is priced on the tables of the release it ran,
    or the newest older one measured."""
    if asked in versions:
        return str(asked)
    if not known_release(asked):
        return versions[-1]
    return _by_nearness(versions, str(asked))[0]


def _file_version(name: str, gpu: str, engine: str) -> str:
    """The release of a "<gpu>.<engine>.<version>.json" file name."""
    return name[len(gpu) + len(engine) + 2 : -len(".json")]


def _by_nearness(versions: tuple, version: str) -> list:
    """`versions` nearest `version` first (nearest_version's order: it and the older ones newest
    first, then the newer ones oldest first)."""
    key = release_order(version)
    below = [v for v in versions if release_order(v) <= key]
    return below[::-1] + [v for v in versions if release_order(v) > key]


_MOE_FORMAT = re.compile(r"^moe_([a-z0-9]+)_")


@cache
def _moe_curves_by_format(gpu: str, engine: str, version: str) -> tuple[dict, dict]:
    """(the moe/ curves of this GPU and engine's `version` file, with each format that file has
    no shape of taken whole from the nearest release's file that has it; format -> that
    release): a release that timed no kernel of a format says nothing of it, the nearest one
    that did says most."""
    versions = _folder_versions(MOE_FOLDER, gpu, engine)
    out: dict = {}
    where: dict = {}
    for v in _by_nearness(versions, version):
        curves = moe_curves(f"{gpu}.{engine}.{v}.json")
        have = {m[1] for k in out if (m := _MOE_FORMAT.match(k))}
        for key, curve in curves.items():
            m = _MOE_FORMAT.match(key)
            fmt = m[1] if m else ""
            if v == version or (fmt and fmt not in have):
                out[key] = curve
                if v != version:
                    where[fmt] = v
    return out, where


class MoeRunnerRows(NamedTuple):
    """The fused-MoE rows of one shape as the runner the engine resolves ran them."""

    curve: tuple  # ((tokens, seconds), ...): that runner's rows, else moe_curves_s's (untimed)
    release: str | None  # the release whose rows those are (None: no release timed the runner)


@cache
def moe_runner_rows(gpu: str, engine: str, version: str, key: str, sources: tuple) -> MoeRunnerRows:
    """The curve of fused-MoE shape `key` as timed under the runner whose kernel_source labels
    are `sources` (the moe/ files' `runners`), from the release nearest `version` that timed
    it so (nearest_version's order: it and the older ones newest first, then the newer ones),
    its rows alone where that release timed the shape under several runners; a release's fastest
    rows (`us`) where it timed the shape under that runner only. None of them: the curve
    moe_curves_s holds for `version` (the fastest of its release's runners), release None. A
    release timed one runner per format (aiconfigurator's collector: SGLang 0.5.9's B200
    block FP8 triton's, 0.5.14's flashinfer_trtllm's), the engine runs the one its server_args
    resolve for the model, GPU and release (engines.moe_backend.sglang_moe_runner)."""
    versions = _folder_versions(MOE_FOLDER, gpu, engine)
    for v in _by_nearness(versions, version):
        runs, rows = moe_runners(f"{gpu}.{engine}.{v}.json").get(key, ((), {}))
        curves = moe_curves(f"{gpu}.{engine}.{v}.json")
        if rows:
            own = [src for src in sources if src in rows]
            if own:
                return MoeRunnerRows(rows[own[0]], v)
        elif runs and set(runs) <= set(sources) and key in curves:
            return MoeRunnerRows(curves[key], v)
    base = _moe_curves_by_format(gpu, engine, version)[0]
    return MoeRunnerRows(base.get(key, ()), None)


@cache
def _folder_versions(folder: Path, gpu: str, engine: str) -> tuple:
    """The releases of this GPU and engine's files in a grid `folder`, oldest first."""
    return tuple(
        sorted(
            (_file_version(p.name, gpu, engine) for p in folder.glob(f"{gpu}.{engine}.*.json")),
            key=release_order,
        )
    )


@cache
def grid_file(folder: Path, gpu: str, engine: str, version: str) -> str | None:
    """The file of a grid family (`folder`: moe/, gemm/, attention/, dsa/, recurrent/) for these
    tables: the tables' own release where it has one, else the release nearest it that has
    (nearest_version); None where this GPU and engine have none."""
    versions = _folder_versions(folder, gpu, engine)
    if not versions:
        return None
    return f"{gpu}.{engine}.{nearest_version(versions, version)}.json"


@cache
def available() -> dict:
    """{(gpu, engine): (version, ...) oldest first} of the data files."""
    out: dict = {}
    for path in FOLDER.glob("*.json"):
        m = _FILE.match(path.name)
        if m:
            out.setdefault((m[1], m[2]), []).append(m[3])
    return {key: tuple(sorted(v, key=release_order)) for key, v in out.items()}


def table_gpus() -> set:
    return {gpu for gpu, _ in available()}


def check_table_key(key: str, where: str) -> str:
    """`key` if kvplan has tables for that GPU, else a one-line error naming the known ones."""
    if key not in table_gpus():
        known = ", ".join(sorted(table_gpus()))
        raise KvplanError(f"{where}: no kernel tables {key!r} (known: {known})")
    return key


def _read(path: Path) -> dict:
    """A kernel-table file's JSON, or one line naming the file (relative to FOLDER)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise KvplanError(f"kernel tables {path.relative_to(FOLDER)}: {exc}") from None


@cache
def _load(gpu: str, engine: str, version: str) -> dict:
    return _read(FOLDER / f"{gpu}.{engine}.{version}.json")


def _pairs(d: dict) -> dict:
    return {k: tuple(v) for k, v in d.items()}


@cache
def _achieved(gpu: str, engine: str, version: str) -> Achieved:
    doc = _load(gpu, engine, version)
    a = doc["achieved"]
    return Achieved(
        dense=_pairs(a["dense"]),
        experts=_pairs(a["experts"]),
        attention=tuple(a["attention"]),
        mla=tuple(a["mla"]),
        allreduce_call_s=a["allreduce_call_s"],
        link=a["link"],
        experts_curve={
            k: tuple(tuple(p) for p in curve) for k, curve in a["experts_curve"].items()
        },
        source=doc["name"],
        floors_s=dict(doc.get("floors_s") or {}),
        allgather_call_s=a.get("allgather_call_s"),
        allreduce_curve_s_by_gpus={
            int(k): tuple((float(x), float(y)) for x, y in curve)
            for k, curve in (a.get("allreduce_curve_s_by_gpus") or {}).items()
        },
    )


@cache
def _dsa(name: str) -> DsaGrids:
    d = _read(DSA_FOLDER / name)
    baseline = d.get("baseline", "mla_module")
    others = tuple(_dsa_grids(s, d["version"], baseline) for s in d.get("shapes", ()))
    return _dsa_grids(d, d["version"], baseline)._replace(others=others)


@cache
def _dsa_eager(name: str) -> DsaEager:
    d = _read(DSA_EAGER_FOLDER / name)

    def rows(by_batch: dict) -> dict:
        return {int(b): tuple((x, us) for x, us in pairs) for b, pairs in by_batch.items()}

    return DsaEager(
        engine_version=d["version"],
        graph={(m["heads"], m["kv_dtype"]): rows(m["graph"]) for m in d["modules"]},
        eager={(m["heads"], m["kv_dtype"]): rows(m["eager"]) for m in d["modules"]},
    )


def _dsa_grids(d: dict, version: str, baseline: str) -> DsaGrids:
    """One shape's grids of a dsa/ file (the top level's, or one of its "shapes")."""
    return DsaGrids(
        batches={k: tuple(v) for k, v in d["batches"].items()},
        lengths={k: tuple(v) for k, v in d["lengths"].items()},
        delta_us={
            (g["phase"], g["heads"], g["kv_dtype"]): tuple(tuple(r) for r in g["rows"])
            for g in d["delta_us"]
        },
        engine_version=version,
        shape=dict(d["shape"]),
        baseline=baseline,
        decode_kernels={kv: tuple(b) for kv, b in d.get("decode_kernels", {}).items()},
    )


@cache
def moe_curves(name: str) -> dict:
    """A moe/ file's curves: moe_shape_key -> ((tokens, seconds), ...), the token counts the
    kernel was timed at (scripts/derive_achieved.py write_moe_curves)."""
    d = _read(MOE_FOLDER / name)
    tokens = d["tokens"]
    return {
        key: tuple((t, us * 1e-6) for t, us in zip(tokens, row, strict=True) if us is not None)
        for key, row in d["us"].items()
    }


@cache
def moe_runners(name: str) -> dict:
    """A moe/ file's `runners` (scripts/derive_achieved.py moe_runner_lines): moe_shape_key ->
    (the kernel_source labels whose rows make its `us` row, {label: ((tokens, seconds), ...)}
    where the release timed the shape under several); {} for a file without them."""
    d = _read(MOE_FOLDER / name)
    tokens = d["tokens"]
    out = {}
    for key, entry in d.get("runners", {}).items():
        rows = {
            src: tuple((t, us * 1e-6) for t, us in zip(tokens, row, strict=True) if us is not None)
            for src, row in entry.get("us", {}).items()
        }
        out[key] = (tuple(entry["runs"]), rows)
    return out


@cache
def gemm_grid(name: str) -> GemmGrid:
    """A gemm/ file's grid (scripts/derive_achieved.py write_gemm_grid)."""
    d = _read(GEMM_FOLDER / name)
    return GemmGrid(
        m=tuple(d["m"]),
        n=tuple(d["n"]),
        k=tuple(d["k"]),
        us={
            fmt: tuple(tuple(tuple(row) for row in block) for block in blocks)
            for fmt, blocks in d["us"].items()
        },
        bmm_heads=tuple((d.get("mla_bmm") or {}).get("heads") or ()),
        bmm_us={
            fmt: {op: tuple(tuple(row) for row in rows) for op, rows in ops.items()}
            for fmt, ops in ((d.get("mla_bmm") or {}).get("us") or {}).items()
        },
    )


@cache
def recurrent_grid(name: str) -> RecurrentGrid:
    """A recurrent/ file's grid (scripts/derive_achieved.py write_recurrent_grid)."""
    d = _read(RECURRENT_FOLDER / name)
    decode, prefill = {}, {}
    for key, value in d["us"].items():
        shape, phase = key.rsplit("/", 1)
        if phase == "decode":
            decode[shape] = tuple(value)
        else:
            prefill[shape] = tuple(tuple(row) for row in value)
    return RecurrentGrid(
        decode_batch=tuple(d["decode_batch"]),
        prefill_batch=tuple(d["prefill_batch"]),
        prefill_tokens=tuple(d["prefill_tokens"]),
        decode=decode,
        prefill=prefill,
        source=d["source"],
    )


class BackendTiming(NamedTuple):
    """One attention backend's own kernels on one GPU under one engine (attention/ files,
    scripts/derive_achieved.py attention_backends): kind "mha" (GQA/MHA tables) or "mla"."""

    kind: str
    backend: str  # the name the engine's flag takes ("triton", "FLASH_ATTN")
    # (compute, memory) fractions of the datasheet rates over the backend's own rows (None:
    # its rows hold no shape that side needs: the default tables' pair stands)
    pair: tuple[float, float] | None
    floor_s: float | None  # its smallest decode call at 1-16 sequences
    # {cache dtype ("bfloat16", "fp8"): ((query heads, ((batch, ((KV bytes per sequence,
    # seconds), ...)), ...)), ...)}: the measured decode call by the query heads on the rank,
    # the sequences in it and the bytes each reads, heads and batches ascending
    # (decode_calls_for picks a cache's)
    decode_calls: dict
    kernel_source: tuple  # aiconfigurator's kernel_source names read
    version: str  # the engine version the rows were measured on
    rows: int  # prefill + decode rows
    # {cache dtype ("bfloat16", "fp8"): {"<qk head dim>x<v head dim>": ((units, ((prompt
    # tokens, seconds), ...)), ...)}}: the median prefill call with no cached tokens by the
    # call's sequences x query heads on the rank (units, ascending) and prompt tokens per sequence
    prefill_calls: dict = {}
    # the GPU whose rows these are, scaled by the fitted ratio of this GPU's time over its
    # (transfer.json, borrowed_backends); "": this GPU's own rows
    borrowed_from: str = ""
    # the fitted ratio's median over the decode calls both GPUs timed (1.0: own rows)
    ratio_median: float = 1.0


def decode_calls_dtype(timing: BackendTiming, cache_dtype: str) -> str | None:
    """The cache dtype whose decode calls a `cache_dtype` cache's attention runs on
    (BackendTiming.decode_calls): its own where the backend timed it; where it timed only the
    other dtype, that one, read by the bytes each sequence holds (the measured kernel at the
    same traffic stands in: a stand-in the sim-attention-cache-stand-in note names); None
    where it timed none."""
    if cache_dtype in timing.decode_calls:
        return cache_dtype
    return next(iter(timing.decode_calls), None)


def decode_calls_for(timing: BackendTiming, cache_dtype: str) -> tuple:
    """The decode calls a `cache_dtype` cache's attention runs on (decode_calls_dtype's rows;
    () where the backend timed none)."""
    dtype = decode_calls_dtype(timing, cache_dtype)
    return () if dtype is None else timing.decode_calls[dtype]


def _curves(by_key: dict) -> tuple:
    """((key, ((x, y), ...)), ...) from {"key": [[x, y], ...]}, keys ascending as numbers."""
    return tuple(
        (int(key), tuple((float(x), float(y)) for x, y in curve))
        for key, curve in sorted(by_key.items(), key=lambda kv: int(kv[0]))
    )


@cache
def attention_backends(name: str) -> dict:
    """An attention/ file's backends: (kind, backend) -> BackendTiming."""
    d = _read(ATTENTION_FOLDER / name)
    out = {}
    for key, e in d["backends"].items():
        kind, backend = key.split(":", 1)
        out[(kind, backend)] = BackendTiming(
            kind=kind,
            backend=backend,
            pair=tuple(e["pair"]) if e["pair"] else None,
            floor_s=e["floor_s"],
            decode_calls={
                kv: tuple(
                    (int(heads), _curves(by_batch))
                    for heads, by_batch in sorted(by_heads.items(), key=lambda item: int(item[0]))
                )
                for kv, by_heads in e["decode_calls"].items()
            },
            kernel_source=tuple(e["kernel_source"]),
            version=e["version"],
            rows=e["rows"]["prefill"] + e["rows"]["decode"],
            prefill_calls={
                kv: {head: _curves(by_units) for head, by_units in heads.items()}
                for kv, heads in e.get("prefill_calls", {}).items()
            },
        )
    return out


def ratio_at(ratio: dict, key: int, x: float) -> float:
    """The fitted time ratio (transfer.json: {key: [[x, ratio], ...]}) at a call of `key`
    sequences (or units) and size `x`: the curve of the largest fitted key at or below `key`
    (the smallest below them all), linear in log(x) and log(ratio) between its points, its end
    values beyond (kvplan.curves.curve_value)."""
    keys = sorted(int(k) for k in ratio)
    below = [k for k in keys if k <= key]
    curve = ratio[str(below[-1] if below else keys[0])]
    return curve_value(tuple((float(a), float(r)) for a, r in curve), x)


def _scaled(by_key: tuple, ratio: dict) -> tuple:
    """((key, ((x, seconds x ratio_at(key, x)), ...)), ...)"""
    return tuple(
        (key, tuple((x, s * ratio_at(ratio, key, x)) for x, s in curve)) for key, curve in by_key
    )


@cache
def transfer_doc() -> dict:
    """transfer.json (scripts/derive_transfer.py); {} where there is none."""
    return _read(TRANSFER_FILE) if TRANSFER_FILE.is_file() else {}


@cache
def borrowed_backends(gpu: str, engine: str, version: str) -> dict:
    """(kind, backend) -> BackendTiming of the attention backends this GPU's tables lack and a
    GPU of the same vendor, engine and version has (transfer.json): the lender's calls times
    the ratio of this GPU's time over the lender's fitted on the calls both timed for the same
    backend's other kind (decode by batch and bytes, prefill by units and tokens), the floor
    the smallest such decode call at 1-16 sequences (derive_achieved's definition), no pair
    (the default tables' fractions stand where no call is measured)."""
    out = {}
    for e in transfer_doc().get("borrowed", ()):
        if (e["gpu"], e["engine"], e["version"]) != (gpu, engine, version):
            continue
        lent = attention_backends(f"{e['lender']}.{engine}.{version}.json")
        timing = lent[tuple(e["backend"].split(":", 1))]
        decode = {
            kv: tuple((heads, _scaled(calls, e["ratio"]["decode"])) for heads, calls in by_heads)
            for kv, by_heads in timing.decode_calls.items()
        }
        prefill_ratio = e["ratio"].get("prefill")
        floors = [
            s
            for by_heads in decode.values()
            for _, by_batch in by_heads
            for batch, curve in by_batch
            if batch <= 16
            for _, s in curve
        ]
        out[(timing.kind, timing.backend)] = timing._replace(
            pair=None,
            floor_s=min(floors) if floors else None,
            decode_calls=decode,
            prefill_calls={
                dtype: {head: _scaled(by_units, prefill_ratio) for head, by_units in heads.items()}
                for dtype, heads in timing.prefill_calls.items()
            }
            if prefill_ratio
            else {},
            borrowed_from=e["lender"],
            ratio_median=e["summary"]["decode"]["median"],
        )
    return out


def _borrowed_version(gpu: str, engine: str, version: str) -> str:
    """The release whose borrowed backends (transfer.json) a run of these tables reads: the
    one measured nearest the tables' (nearest_version; the lender's rows are of the release
    derive_transfer.py fitted them on), `version` itself where none is held."""
    held = {
        e["version"]
        for e in transfer_doc().get("borrowed", ())
        if (e["gpu"], e["engine"]) == (gpu, engine)
    }
    return nearest_version(tuple(sorted(held, key=release_order)), version) if held else version


def borrowed_words(timing: BackendTiming, engine: str) -> str:
    """A borrowed backend's part of the step in words ("the MLA attention under triton (RTX
    PRO 6000 Blackwell's rows x 1.24, the median fitted ratio)"); "" for a GPU's own rows."""
    if not timing.borrowed_from:
        return ""
    lender = _load(timing.borrowed_from, engine, timing.version)["name"]
    return (
        f"the {timing.kind.upper()} attention under {timing.backend} ({lender}'s rows x "
        f"{timing.ratio_median:.2f}, the median fitted ratio)"
    )


def _moe_file(gpu: str, engine: str, version: str) -> str | None:
    return grid_file(MOE_FOLDER, gpu, engine, version)


def _dsa_file(gpu: str, engine: str, version: str) -> str | None:
    """The name of the DSA module grids of these tables' release, or the nearest release's
    (None: there are none)."""
    return grid_file(DSA_FOLDER, gpu, engine, version)


def _pick(gpu: str, engine: str, asked: str | None) -> str | None:
    """The tables' release for a run of `asked` (nearest_version; None: no tables of this GPU
    and engine)."""
    versions = available().get((gpu, engine))
    if not versions:
        return None
    return nearest_version(versions, asked)


def datasheet_achieved():
    """The fractions a GPU without tables runs at (the H100 SXM's, vLLM 0.14.0)."""
    return _achieved(DATASHEET_TABLES, "vllm", DATASHEET_VERSION)


def parse_field(value: object, where: str) -> dict:
    """A profile's `kernel_tables` mapping ({vllm: key, sglang: key} or {borrowed: key}),
    every key checked against the data files."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not value:
        raise KvplanError(
            f"{where}: kernel_tables must be a mapping of engine (or borrowed) to tables"
        )
    out = {}
    for engine, key in value.items():
        if engine not in (*ENGINES, "borrowed", "partial"):
            raise KvplanError(
                f"{where}: kernel_tables has {str(engine)[:20]!r} "
                f"({', '.join(ENGINES)}, borrowed, partial)"
            )
        if engine == "partial":
            out[engine] = check_partial_key(str(key)[:40], f"{where}: kernel_tables.partial")
        else:
            out[engine] = check_table_key(str(key)[:40], f"{where}: kernel_tables.{engine}")
    if ("borrowed" in out or "partial" in out) and len(out) > 1:
        raise KvplanError(
            f"{where}: kernel_tables is either its own per engine, borrowed or partial"
        )
    return out


def check_partial_key(key: str, where: str) -> str:
    """`key` if PARTIAL_FOLDER has its measurements, else a one-line error naming the known."""
    known = sorted(p.stem for p in PARTIAL_FOLDER.glob("*.json"))
    if key not in known:
        raise KvplanError(f"{where}: no kernel measurements {key!r} (known: {', '.join(known)})")
    return key


@cache
def partial_doc(key: str) -> dict:
    """partial/<key>.json: a datasheet GPU's kernel-level measurements with their provenance."""
    return _read(PARTIAL_FOLDER / f"{key}.json")


def with_measured(base: Achieved, measured: dict) -> Achieved:
    """`base` (the H100's fractions) with a partial file's `measured` figures in their place:
    dense_memory {format: memory fraction}, dense_compute {format: compute fraction}, floors_s
    {family: seconds} (a fused-MoE format's floor drops the H100's per-shape floors of that
    format), allreduce_call_s, experts_curve {format: [[tokens per expert, slowdown], ...]} (the
    fused-MoE kernel's own curve; the formats it lacks keep the H100's)."""
    dense = dict(base.dense)
    for fmt, memory in (measured.get("dense_memory") or {}).items():
        dense[fmt] = (dense[fmt][0], memory)
    for fmt, compute in (measured.get("dense_compute") or {}).items():
        dense[fmt] = (compute, dense[fmt][1])
    own_floors = measured.get("floors_s") or {}
    # a format's fused-MoE floor measured here replaces the H100's per-shape ones of that
    # format too (moe_fp8_<shape>: the H100's kernel at that shape, not this GPU's)
    floors = {
        k: v
        for k, v in base.floors_s.items()
        if not any(k.startswith(f"{family}_") for family in own_floors if family.startswith("moe_"))
    }
    floors.update(own_floors)
    curves = {
        **base.experts_curve,
        **{
            fmt: tuple((float(x), float(y)) for x, y in curve)
            for fmt, curve in (measured.get("experts_curve") or {}).items()
        },
    }
    return base._replace(
        dense=dense,
        floors_s=floors,
        allreduce_call_s=measured.get("allreduce_call_s", base.allreduce_call_s),
        # the H100's per-count times do not describe this GPU's measured call
        allreduce_curve_s_by_gpus=(
            {} if "allreduce_call_s" in measured else base.allreduce_curve_s_by_gpus
        ),
        experts_curve=curves,
    )


def tables_for(profile, engine: str = "vllm", engine_version: str | None = None) -> KernelTables:
    """The kernel tables a run of `engine` release `engine_version` on `profile` uses (see the
    module's docstring): the nearest measured release (nearest_version: the asked one, else
    the newest older one, else the oldest; the newest for None or a bare series), each grid
    family that release's, else the nearest release's that has it (grid_file)."""
    field = getattr(profile, "kernel_tables", None) or {}
    lender = field.get("borrowed")
    same = bool(lender) and same_silicon(profile, str(lender))
    return _tables_for(tuple(sorted(field.items())), engine, engine_version, same)


def _rates(bandwidth, peaks: dict) -> tuple:
    return float(bandwidth), tuple(sorted((k, float(v)) for k, v in peaks.items()))


def same_silicon(profile, lender: str) -> bool:
    """Whether `profile`'s datasheet rates (memory bandwidth, every dense peak) are those of the
    GPU that `lender`'s tables ran on (transfer.json's datasheet, from kvplan's profile of it:
    the H800's are the H100 SXM's, one die and one HBM3; the H100 NVL's, the A100 40GB's, the
    A10G's are not): only there does the lender's measured kernel time stand for the
    borrower's."""
    sheet = transfer_doc().get("datasheet", {}).get(lender)
    if sheet is None or getattr(profile, "memory_bandwidth_bytes_per_s", None) is None:
        return False
    return _rates(sheet["memory_bandwidth_bytes_per_s"], sheet["peak_flop_per_s"]) == _rates(
        profile.memory_bandwidth_bytes_per_s, profile.peak_flop_per_s
    )


@cache
def _tables_for(
    items: tuple, engine: str, engine_version: str | None, same_silicon: bool = False
) -> KernelTables:
    """tables_for by the profile's `kernel_tables` field alone (as sorted items), kept: a
    comparison of GPU kinds prices over a hundred layouts."""
    field = dict(items)
    own_gpu = field.get(engine)
    others = [e for e in ENGINES if e != engine]
    if own_gpu:
        gpu, use, evidence, borrowed = own_gpu, engine, "own", None
    elif any(field.get(e) for e in others):
        gpu = next(field[e] for e in others if field.get(e))
        use = next(e for e in others if field.get(e))
        evidence, borrowed = "other-engine", None
    elif field.get("partial"):
        gpu, use, evidence, borrowed = DATASHEET_TABLES, "vllm", "datasheet", DATASHEET_TABLES
    elif field.get("borrowed"):
        gpu, use, evidence, borrowed = field["borrowed"], engine, "borrowed", field["borrowed"]
    else:
        gpu, use, evidence, borrowed = DATASHEET_TABLES, "vllm", "datasheet", DATASHEET_TABLES
    version = _pick(gpu, use, engine_version if use == engine else None)
    if evidence == "datasheet":
        version = DATASHEET_VERSION
    if version is None:  # this GPU's tables exist for the other engine only
        use = next(e for e in ENGINES if available().get((gpu, e)))
        version = _pick(gpu, use, None)
        assert version is not None, "check_table_key: every key has tables for an engine"
        if evidence == "own":
            evidence = "other-engine"
    doc = _load(gpu, use, version)
    # the absolute-time grids hold on this GPU's own tables for the simulated engine, and on a
    # borrowed GPU's of the same rates (KernelTables.grids_hold)
    grids_hold = evidence == "own" or (evidence == "borrowed" and same_silicon)
    achieved, source, measured = _achieved(gpu, use, version), doc["source"], ""
    if field.get("partial"):
        part = partial_doc(field["partial"])
        achieved = with_measured(achieved, part["measured"])
        source = f"{part['source']}; the rest: {source}"
        measured = part["words"]
    return KernelTables(
        achieved=achieved,
        # DSA module grids only for the engine and GPU kind they timed (SGLang runs its own
        # kernels; a datasheet GPU may not run vLLM's DSA at all)
        dsa_file=_dsa_file(gpu, use, version) if use == engine and grids_hold else None,
        # the shapes' absolute times hold on the GPU that ran them (not on a datasheet GPU's,
        # nor on a borrowing GPU of other rates); the other engine's, on this GPU, do
        moe_file=_moe_file(gpu, use, version) if grids_hold or evidence == "other-engine" else None,
        evidence=evidence,
        borrowed_from=borrowed,
        source=source,
        gpu=gpu,
        name=doc["name"],
        engine=use,
        engine_version=version,
        asked_version=engine_version,
        measured=measured,
        grids_hold=grids_hold,
    )


class HostOverheadsFile(NamedTuple):
    values: dict
    source: str


@cache
def host_overheads_data() -> HostOverheadsFile:
    doc = json.loads((FOLDER / "host_overheads.json").read_text(encoding="utf-8"))
    keys = (
        "per_step_s",
        "per_request_s",
        "per_layer_s",
        "eager_per_layer_s",
        "reference_layer_launches",
    )
    values = {k: doc[k] for k in keys}
    # one eager launch: the PyTorch calls a dense layer's kernels cost the host, measured
    # (host_dispatch.json), and the driver's enqueue (cited in host_overheads.json)
    dispatch = json.loads((FOLDER / "host_dispatch.json").read_text(encoding="utf-8"))
    dense = dispatch["devices"]["cpu"]["layers"]["dense_llama"]
    values["eager_per_launch_s"] = dense["host_us_per_launch"] * 1e-6 + doc["cuda_launch_enqueue_s"]
    return HostOverheadsFile(values, doc["source"])


class FrontendFile(NamedTuple):
    """sglang_frontend.json (scripts/bench_frontend.py): the CPU seconds SGLang's HTTP server
    process spends on each chat request before the scheduler sees it (json, validation, chat
    template with tokenization, the pickle to the scheduler), and the CPU it was timed on."""

    serial_request_s: float
    prompt_tokens: float  # the timed prompts' mean length, chat template included
    cpu: str
    source: str


@cache
def frontend_data() -> FrontendFile:
    doc = json.loads((FOLDER / "sglang_frontend.json").read_text(encoding="utf-8"))
    return FrontendFile(
        doc["serial_request_us"] * 1e-6, doc["prompt_tokens"], doc["cpu"], doc["source"]
    )


class DetokenizerFile(NamedTuple):
    """sglang_detokenizer.json (scripts/bench_detokenizer.py): SGLang's detokenizer seconds per
    streamed token per request on a Moonshot tiktoken tokenizer, by decode path, at the largest
    batch timed (where its rate caps what clients receive), and the CPU they were timed on."""

    per_request_token_s: dict  # decode path ("hf_kwargs", "cached_special", "native") -> s
    batch: int  # requests streaming a token in the step the rows are taken at
    cpu: str
    source: str


@cache
def detokenizer_data() -> DetokenizerFile:
    doc = json.loads((FOLDER / "sglang_detokenizer.json").read_text(encoding="utf-8"))
    rows = doc["per_request_token_us"]
    batch = max(int(b) for b in rows["hf_kwargs"])
    per_token = {path: by_batch[str(batch)] * 1e-6 for path, by_batch in rows.items()}
    return DetokenizerFile(per_token, batch, doc["cpu"], doc["source"])
