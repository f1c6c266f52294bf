"""Speculative decoding in `simulate` and `plan`, as vLLM and SGLang spell and run it.

Spellings (both resolve to one `SpecDecode`):
- vLLM: `--speculative-config '<JSON>'` as `vllm serve` takes it (vllm/config/speculative.py,
  SpeculativeConfig): `method` mtp (and the per-model MTP names vLLM folds into it:
  deepseek_mtp, glm4_moe_mtp, ...), eagle, eagle3, draft_model, ngram (without `method`:
  ngram when `model` is "ngram", else draft_model); `model`; `num_speculative_tokens` (k; for
  mtp the checkpoint's num_nextn_predict_layers when not given). vLLM's own acceptance keys
  (`rejection_sample_method: "synthetic"` with `synthetic_acceptance_rates` or
  `synthetic_acceptance_length`) are read as the acceptance.
- SGLang: `--speculative-algorithm EAGLE|EAGLE3|NEXTN|STANDALONE|NGRAM` (NEXTN is EAGLE;
  EAGLE with no draft path on a model with MTP layers runs them), `--speculative-num-steps`,
  `--speculative-eagle-topk`, `--speculative-num-draft-tokens` (all three unset: SGLang 0.5's
  auto_choose_speculative_params, (5, 4, 8) for Llama, (3, 1, 4) otherwise; topk 1 forces
  draft tokens = steps + 1), `--speculative-draft-model-path`; NGRAM verifies
  --speculative-num-draft-tokens (12, its max match window) tokens with no draft forward.

A round, per running sequence: k draft forwards (topk branches each), then one target forward
verifying `verify_tokens` tokens (k + 1 for a chain) with each cache read once
(StepModel.step(queries=...)). It yields E tokens, the expected value (never sampled, so a run
is deterministic): (1 - a^(k+1)) / (1 - a) for a per-token acceptance rate a
(techniques.expected_tokens_per_round), 1 + the sum of per-position rates, or a mean acceptance
length as vLLM's spec-decode metrics ("Mean acceptance length") and SGLang's log ("accept
len") print it. The simulator steps token by token: each decode step is 1/E of a round
(techniques.speculative_round_s / E), a prefill chunk in it is charged in full, and with it the
draft's forward over the chunk's tokens (`draft_extend`): SGLang follows every target extend
with the draft's (speculative/eagle_worker.py forward_batch_generation -> forward_draft_extend,
the prompt's hidden states through the MTP/EAGLE layers and the head on each chunk's last
position) and vLLM's proposer runs its first forward over every scheduled token, prefill chunks
included (v1/spec_decode/eagle.py propose).

The draft: a draft model (bundled name or path) is priced by its own StepModel at the target's
TP; an MTP or EAGLE head as `layers` of the target's layers plus the target's LM head; n-gram
lookup as host work only (one more per-request host pass a round).
"""

from __future__ import annotations

import json
import math

from kvplan.anatomy.model import ModelSpec
from kvplan.errors import KvplanError
from kvplan.formulas.batch_step import (
    ENGINE_TERMS,
    GPU_TERMS,
    BatchShape,
    StepModel,
    engine_step_time,
)
from kvplan.formulas.step_time import StepTime, time_floor_s
from kvplan.formulas.techniques import (
    expected_tokens_per_round,
    speculative_overlap_round_s,
    speculative_round_s,
    tokens_per_round_from_positions,
)
from kvplan.formulas.weights import part_bytes_per_param
from kvplan.record import NamedTuple

METHODS = ("mtp", "eagle", "eagle3", "draft_model", "ngram")
# SGLang's state commit after a verification: the accepted position's state read once from the
# verification's intermediate cache and written once into the pool
STATE_COMMIT_PASSES = 2
# vLLM's per-model MTP method names (MTPModelTypes), each folded into "mtp" with a warning
VLLM_MTP_NAMES = frozenset(
    {
        "mtp",
        "deepseek_mtp",
        "mimo_mtp",
        "mimo_v2_mtp",
        "glm4_moe_mtp",
        "glm4_moe_lite_mtp",
        "ernie_mtp",
        "nemotron_h_mtp",
        "qwen3_next_mtp",
        "qwen3_5_mtp",
        "longcat_flash_mtp",
        "pangu_ultra_moe_mtp",
        "step3p5_mtp",
        "minimax_m3_mtp",
    }
)
VLLM_METHODS = {**dict.fromkeys(VLLM_MTP_NAMES, "mtp"), "ngram_gpu": "ngram"}
VLLM_METHODS.update({m: m for m in ("eagle", "eagle3", "draft_model", "ngram")})
# SpeculativeConfig keys kvplan reads, and the ones it accepts that do not change the step
VLLM_KEYS = (
    "method",
    "model",
    "num_speculative_tokens",
    "draft_tensor_parallel_size",
    "rejection_sample_method",
    "synthetic_acceptance_rates",
    "synthetic_acceptance_length",
)
VLLM_IGNORED = (
    "prompt_lookup_max",
    "prompt_lookup_min",
    "quantization",
    "revision",
    "code_revision",
    "max_model_len",
    "draft_sample_method",
    "disable_padded_drafter_batch",
    "enforce_eager",
    "use_local_argmax_reduction",
    "kv_cache_dtype",
    "attention_backend",
    "moe_backend",
)
SGLANG_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
SGLANG_NGRAM_DRAFT_TOKENS = 12  # speculative_ngram_max_match_window_size
SGLANG_NGRAM_TOPK = 10  # speculative_ngram_max_bfs_breadth
# forward passes a SGLang EAGLE round prepares on the host beside its verification's
# (speculative/eagle_worker.py, forward_batch_generation): draft() and
# forward_draft_extend_after_decode() each build their own ForwardBatch (ForwardBatch.init_new)
# and replay their own graph, after host syncs (_draft_preprocess_decode's and
# forward_draft_extend_after_decode's seq_lens .item(), EagleVerifyInput.verify's .tolist())
SGLANG_DRAFT_PASSES = 2
# SGLang's scheduler under DP attention gathers every rank's batch facts before each batch runs
# (scheduler_dp_attn_mixin.prepare_mlp_sync_batch_raw -> MLPSyncBatchInfo.all_gather:
# all_gather_into_tensor of num_tokens, num_tokens_for_logprob, can_cuda_graph,
# is_extend_in_batch, local_can_run_tbo, local_forward_mode, int64 each, over the TP group; on
# its device group when the overlap scheduler is off, as it is when speculating, so serial with
# the GPU's work). Speculating, get_next_batch_to_run syncs the new prefill batch first ("prefill
# and decode batches will not be mixed when spec and dp-attn is enabled") and, when no rank
# formed one, syncs the decode batch again: two a decode round, one a prefill batch;
# --speculative-skip-dp-mlp-sync skips the first (one each, and the ranks may mix them).
MLP_SYNC_BYTES = 6 * 8
# SGLang's spec v2 beside the overlap scheduler (engines.sglang.sglang_spec_v2; 0.5.11
# speculative/eagle_worker_v2.py, eagle_info_v2.py; the same from 0.5.13 in
# managers/overlap_utils.py): a round launches the draft steps, the verification and the draft
# extend over the k + 1 verified positions (_draft_extend_for_decode) without a host sync, and
# the scheduler processes the round's results (process_batch_result: the accepted tokens) after
# launching the next round (scheduler.event_loop_overlap), so the round's host work overlaps the
# GPU's. One wait stays: preparing the next decode round (prepare_for_decode) waits for this
# round's verification (0.5.11 maybe_wait_verify_done and seq_lens.cpu(), "FIXME make this sync
# optional"; from 0.5.13 resolve_seq_lens_cpu's D2H synchronize where the attention backend
# needs_cpu_seq_lens, the base class's default), then builds the batch and launches it: that
# pass, priced as the verification step's own host pass (per_step_s + per_request_s a
# sequence), overlaps only the draft extend queued behind the verification. Backends that skip
# the copy (needs_cpu_seq_lens False: trtllm_mla from 0.5.13, flashattention without a KV
# shard pool from 0.5.16) hide it too, which kvplan does not model (note sglang-spec-mode)
SGLANG_V2_EXPOSED_PASSES = 1
MLP_SYNCS_DECODE = 2
MLP_SYNCS_DECODE_SKIPPED = 1
MAX_DRAFT_TOKENS = 64
ASSUMED_ACCEPTANCE = 0.7  # per drafted token, when no acceptance is given (whatif's default)


class SpecDecode(NamedTuple):
    """What an engine's speculative flags ask for, as one request."""

    method: str  # mtp, eagle, eagle3, draft_model, ngram
    num_steps: int  # k: draft forwards per round (vLLM num_speculative_tokens)
    topk: int = 1  # SGLang's draft tree: branches per draft step
    verify_tokens: int = 2  # tokens per sequence the target verifies (k + 1 for a chain)
    draft: str | None = None  # the draft model or head as given
    # vLLM's synthetic acceptance keys, where given: per-position rates or a mean length
    positions: tuple[float, ...] | None = None
    length: float | None = None
    # vLLM: the --speculative-config object as given (compact JSON), which a launch repeats
    config: str | None = None


class Speculation(NamedTuple):
    """A replica's speculative decoding, resolved (SI numbers; per GPU where a size)."""

    request: SpecDecode
    tokens_per_round: float  # E: tokens a round yields per sequence
    acceptance: str  # how E was given: rate, positions, length, assumed
    acceptance_rate: float | None  # the per-token rate, where one was given or assumed
    draft_layers: int  # MTP / EAGLE: target-shaped layers one draft forward runs
    draft_weight_bytes: float  # the draft's weights on one GPU
    draft_kv_bytes_per_token: float  # the draft's KV cache per token on one GPU
    lookahead: int  # slots a running request holds ahead (verify_tokens - 1)
    # what a launch names the draft model by (launch_flags): a loaded draft's Hub id (a bundled
    # alias is kvplan's name, which no engine loads), else the draft as given; None: none given
    draft_id: str | None = None


def parse_vllm(text: str, spec: ModelSpec) -> SpecDecode:
    """`--speculative-config '<JSON>'` -> SpecDecode, refused where vLLM refuses or kvplan
    does not model it."""
    try:
        config = json.loads(text)
    except (ValueError, RecursionError):
        raise KvplanError(
            "--speculative-config must be JSON, as vllm serve takes it: "
            '\'{"method": "mtp", "num_speculative_tokens": 1}\''
        ) from None
    if not isinstance(config, dict):
        raise KvplanError("--speculative-config must be a JSON object")
    unknown = [k for k in config if k not in VLLM_KEYS and k not in VLLM_IGNORED]
    if unknown:
        raise KvplanError(
            f"--speculative-config: key {str(unknown[0])[:40]!r} is not one kvplan reads "
            f"({', '.join(VLLM_KEYS + VLLM_IGNORED)})"
        )
    model = config.get("model")
    if model is not None and not isinstance(model, str):
        raise KvplanError("--speculative-config: model must be a string")
    method = config.get("method")
    if method is None:
        method = "ngram" if model in ("ngram", "[ngram]") else "draft_model"
        if model is None:
            raise KvplanError("--speculative-config: give a method or a draft model")
    if not isinstance(method, str) or method not in VLLM_METHODS:
        raise KvplanError(
            f"--speculative-config: method {str(method)[:40]!r}: kvplan simulates "
            f"{', '.join(METHODS)} (and vLLM's MTP names)"
        )
    method = VLLM_METHODS[method]
    k = config.get("num_speculative_tokens")
    if k is None:
        if method != "mtp":
            raise KvplanError(f"--speculative-config: method {method} needs num_speculative_tokens")
        k = mtp_layers(spec) or 1
    k = _count(k, "num_speculative_tokens")
    draft_tp = config.get("draft_tensor_parallel_size")
    if draft_tp is not None and (isinstance(draft_tp, bool) or not isinstance(draft_tp, int)):
        raise KvplanError("--speculative-config: draft_tensor_parallel_size must be an integer")
    if method in ("eagle", "eagle3") and model is None:
        raise KvplanError(f"--speculative-config: method {method} needs the head as model")
    if method == "draft_model" and model is None:
        raise KvplanError("--speculative-config: method draft_model needs a model")
    _prompt_lookup(config)
    positions, length = _synthetic(config, k)
    return SpecDecode(
        method,
        k,
        1,
        k + 1,
        None if method in ("mtp", "ngram") else model,
        positions,
        length,
        json.dumps(config, separators=(",", ":")),
    )


def _prompt_lookup(config: dict) -> None:
    """The n-gram window bounds as vLLM 0.19.1 checks them (config/speculative.py:
    prompt_lookup_max and _min Field(ge=1); 'prompt_lookup_min=N must be <=
    prompt_lookup_max=M')."""
    bounds = {}
    for key in ("prompt_lookup_min", "prompt_lookup_max"):
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise KvplanError(
                f"--speculative-config: {key} {str(value)[:20]} must be an integer of at least 1"
            )
        bounds[key] = value
    low, high = bounds.get("prompt_lookup_min"), bounds.get("prompt_lookup_max")
    if low is not None and high is not None and low > high:
        raise KvplanError(
            f"--speculative-config: prompt_lookup_min={low} must be <= prompt_lookup_max={high}"
        )


def _count(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise KvplanError(f"--speculative-config: {what} must be an integer")
    if not 1 <= value <= MAX_DRAFT_TOKENS:
        raise KvplanError(f"{what} {value} must be between 1 and {MAX_DRAFT_TOKENS}")
    return value


def _synthetic(config: dict, k: int):
    """vLLM's synthetic acceptance: (per-position rates, mean length), at most one given."""
    rates = config.get("synthetic_acceptance_rates")
    length = config.get("synthetic_acceptance_length")
    if rates is None and length is None:
        return None, None
    if config.get("rejection_sample_method") != "synthetic":
        raise KvplanError(
            "--speculative-config: synthetic acceptance keys need "
            '"rejection_sample_method": "synthetic", as vLLM requires'
        )
    if (rates is None) == (length is None):
        raise KvplanError(
            "--speculative-config: give synthetic_acceptance_rates or "
            "synthetic_acceptance_length, not both"
        )
    if rates is not None:
        if not isinstance(rates, list) or not all(_number(r) for r in rates):
            raise KvplanError(
                "--speculative-config: synthetic_acceptance_rates is a list of numbers"
            )
        return check_positions(tuple(float(r) for r in rates), k), None
    if length is None or not _number(length):
        raise KvplanError("--speculative-config: synthetic_acceptance_length is a number")
    return None, check_length(float(length), k)


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_mtp(spec: ModelSpec, request: SpecDecode) -> int:
    """The checkpoint's MTP layers (mtp_layers) a method-mtp request drafts with: one line
    where it has none (resolve's check, and `plan`'s before its search)."""
    count = mtp_layers(spec)
    if request.method == "mtp" and not count:
        raise KvplanError(
            f"{spec.name} has no MTP layers (num_nextn_predict_layers) for method mtp"
        )
    return count


def check_draft_model(spec: ModelSpec, request: SpecDecode, options) -> ModelSpec:
    """A draft_model request's draft (vLLM's "model", SGLang STANDALONE's
    --speculative-draft-model-path), loaded and checked whatever the layout: one line where it
    is none, its vocabulary is not the target's, or SGLang `options.sglang_version` has no
    model for its architecture (it loads the draft through its ModelRegistry too). resolve's
    check, and `plan`'s before its search."""
    from kvplan.inputs.sources import load_model

    if request.draft is None:
        raise KvplanError('--speculative-config: draft_model needs a "model"')
    draft_spec = load_model(request.draft, checkpoint=False)
    if options.engine == "sglang":
        from kvplan.engines.sglang import check_sglang_own_model

        check_sglang_own_model(draft_spec, options.sglang_version)
    if draft_spec.vocab_size != spec.vocab_size:
        raise KvplanError(
            f"the draft {draft_spec.name} has a vocabulary of {draft_spec.vocab_size:,}, "
            f"the target {spec.vocab_size:,}: vLLM and SGLang need the same tokenizer"
        )
    return draft_spec


def check_nextn(spec: ModelSpec, algorithm: str) -> None:
    """SGLang's NEXTN drafts with the checkpoint's own MTP layers (mtp_layers): refused, one
    line, on a model without them (`algorithm` upper case, as SGLANG_ALGORITHMS)."""
    if algorithm == "NEXTN" and not mtp_layers(spec):
        raise KvplanError(f"--speculative-algorithm NEXTN: {spec.name} has no MTP layers")


def parse_sglang(
    algorithm: str,
    num_steps: int | None,
    topk: int | None,
    num_draft_tokens: int | None,
    draft_path: str | None,
    spec: ModelSpec,
) -> SpecDecode:
    """SGLang's --speculative-* flags -> SpecDecode, with server_args' defaults."""
    name = str(algorithm).strip().upper()
    if name not in SGLANG_ALGORITHMS:
        raise KvplanError(
            f"--speculative-algorithm {str(algorithm)[:40]!r}: choose "
            f"{', '.join(SGLANG_ALGORITHMS)}"
        )
    for value, flag in (
        (num_steps, "--speculative-num-steps"),
        (topk, "--speculative-eagle-topk"),
        (num_draft_tokens, "--speculative-num-draft-tokens"),
    ):
        if value is not None and not 1 <= value <= MAX_DRAFT_TOKENS:
            raise KvplanError(f"{flag} {value} must be between 1 and {MAX_DRAFT_TOKENS}")
    if name == "NGRAM":
        tokens = num_draft_tokens or SGLANG_NGRAM_DRAFT_TOKENS
        if tokens < 2:
            raise KvplanError("--speculative-num-draft-tokens must be at least 2 for NGRAM")
        return SpecDecode("ngram", tokens - 1, SGLANG_NGRAM_TOPK, tokens, None)
    if name == "NEXTN" or (name == "EAGLE" and draft_path in (None, spec.hf_id, spec.name)):
        if not mtp_layers(spec):
            check_nextn(spec, name)
            raise KvplanError("--speculative-algorithm EAGLE needs --speculative-draft-model-path")
        method = "mtp"
    elif name == "STANDALONE":
        if draft_path is None:
            raise KvplanError(
                "--speculative-algorithm STANDALONE needs --speculative-draft-model-path"
            )
        method = "draft_model"
    else:
        if draft_path is None:
            raise KvplanError(
                f"--speculative-algorithm {name} needs --speculative-draft-model-path"
            )
        method = name.lower()
    if num_steps is None:
        if topk is not None or num_draft_tokens is not None:
            raise KvplanError(
                "give --speculative-num-steps with --speculative-eagle-topk and "
                "--speculative-num-draft-tokens, or none of them (SGLang's defaults)"
            )
        from kvplan.engines.sglang import sglang_auto_params

        num_steps, topk, num_draft_tokens = sglang_auto_params(spec, method)
    topk = topk or 1
    if topk == 1 or num_draft_tokens is None:  # server_args: a chain verifies steps + 1
        num_draft_tokens = num_steps + 1
    tree_nodes = tree_candidates(num_steps, topk) + 1
    if num_draft_tokens > tree_nodes:
        raise KvplanError(
            f"--speculative-num-draft-tokens {num_draft_tokens}: an EAGLE tree of "
            f"{num_steps} steps x topk {topk} has {tree_nodes} nodes with its root (SGLang's "
            "organize_draft_results takes num_draft_tokens - 1 of them)"
        )
    return SpecDecode(
        method, num_steps, topk, num_draft_tokens, None if method == "mtp" else draft_path
    )


def tree_candidates(num_steps: int, topk: int) -> int:
    """Draft tokens an SGLang EAGLE round scores: topk at its first step, topk x topk at each
    later one (speculative/eagle_utils.py organize_draft_results: score_list is topk +
    (num_steps - 1) x topk^2 wide, and torch.topk takes num_draft_tokens - 1 of them under the
    verified root). A tree verifies num_draft_tokens of these; the longest path it can accept
    is still num_steps drafted tokens and the bonus one (num_steps + 1: check_length)."""
    return topk + (num_steps - 1) * topk * topk


def check_positions(rates: tuple[float, ...], k: int) -> tuple[float, ...]:
    if len(rates) != k:
        raise KvplanError(
            f"give one acceptance rate per drafted position: {k} for {k} drafted tokens, "
            f"not {len(rates)}"
        )
    if not all(0.0 <= r <= 1.0 for r in rates):
        raise KvplanError("each per-position acceptance rate must be between 0 and 1")
    return rates


def check_length(length: float, k: int, verified: int | None = None) -> float:
    """A mean acceptance length in [1, k + 1]: k draft steps (vLLM's num_speculative_tokens,
    SGLang's --speculative-num-steps) and the bonus token. An SGLang tree verifying more
    tokens (`verified` > k + 1) accepts one path of it, at most k + 1 long (eagle_info.py
    EagleVerifyInput.verify: accept_length per sequence counts the accepted tree depth)."""
    if math.isnan(length) or not 1.0 <= length <= k + 1:
        tree = (
            f"; the tree's {verified} verified tokens are branches, one path accepted"
            if verified is not None and verified > k + 1
            else ""
        )
        raise KvplanError(
            f"mean acceptance length {length}: between 1 and {k + 1} (k + 1) for {k} drafted "
            f"tokens{tree}"
        )
    return length


def parse_accept(text: str | None, length: float | None, request: SpecDecode):
    """The acceptance as given: kvplan's --spec-accept (a per-token rate in (0, 1], or
    per-position rates "0.8,0.6,0.4" as vLLM's metrics print them) or --spec-accept-length
    (vLLM's "Mean acceptance length", SGLang's "accept len"), or vLLM's synthetic keys.
    (tokens per round, how it was given, the rate or None)."""
    given = [x for x in (text, length, request.positions, request.length) if x is not None]
    if len(given) > 1:
        raise KvplanError("give the acceptance once: --spec-accept, --spec-accept-length or vLLM's")
    k = request.num_steps
    given_length = length if length is not None else request.length
    if given_length is not None:
        return check_length(float(given_length), k, request.verify_tokens), "length", None
    positions = request.positions
    if text is not None:
        from kvplan.inputs.options import ascii_number

        parts = [p.strip() for p in ascii_number(text, "--spec-accept").split(",")]
        if len(parts) > MAX_DRAFT_TOKENS:
            raise KvplanError(f"--spec-accept: at most {MAX_DRAFT_TOKENS} per-position rates")
        try:
            values = tuple(float(p) for p in parts)
        except ValueError:
            raise KvplanError(
                f"--spec-accept {str(text)[:40]!r}: a rate in (0, 1] or one per drafted position"
            ) from None
        if len(values) == 1:
            rate = values[0]
            if math.isnan(rate) or not 0.0 < rate <= 1.0:
                raise KvplanError(
                    f"--spec-accept {parts[0]}: a per-token acceptance rate in (0, 1]"
                )
            return expected_tokens_per_round(k, rate), "rate", rate
        positions = check_positions(values, k)
    if positions is not None:
        return tokens_per_round_from_positions(positions), "positions", None
    return expected_tokens_per_round(k, ASSUMED_ACCEPTANCE), "assumed", ASSUMED_ACCEPTANCE


def mtp_layers(spec: ModelSpec) -> int:
    """The checkpoint's MTP layers (num_nextn_predict_layers and the like), 0 if none."""
    for n in spec.notes:
        if n.id == "mtp-excluded":
            return int(dict(n.values).get("layers", 0))
    return 0


def layer_weight_bytes(spec: ModelSpec, weights_dtype: str) -> float:
    """Bytes of one of the model's last (MoE where it has MoE) layers: its attention, norms and
    MLP or MoE share, plus an MTP/EAGLE block's 2h x h projection of [embedding; hidden]."""
    parts = spec.param_parts
    attention_layers = max(1, len(spec.attention_layers()))
    total = (
        parts.get("attention", 0)
        / attention_layers
        * part_bytes_per_param(spec, weights_dtype, "attention")
    )
    total += (
        parts.get("norms", 0) / spec.num_layers * part_bytes_per_param(spec, weights_dtype, "norms")
    )
    if spec.moe is not None:
        for part in ("experts", "router", "shared_experts"):
            per_layer = parts.get(part, 0) / spec.moe.num_layers
            total += per_layer * part_bytes_per_param(spec, weights_dtype, part)
    else:
        total += (
            parts.get("mlp", 0) / spec.num_layers * part_bytes_per_param(spec, weights_dtype, "mlp")
        )
    projection = 2 * spec.hidden_size * spec.hidden_size
    return total + projection * part_bytes_per_param(spec, weights_dtype, "attention")


class SpeculativeStepModel:
    """The target's StepModel with each decode step one E-th of a speculative round:
    (k draft steps + one verification of verify_tokens per sequence) / E; a prefill chunk in
    the step costs what it adds to the verification. Everything else is the target's."""

    def __init__(
        self,
        target: StepModel,
        speculation: Speculation,
        draft: StepModel | None,
        sglang_host: bool = False,
        skip_dp_mlp_sync: bool = False,
        overlap: bool = False,
    ):
        self.target, self.speculation, self.draft = target, speculation, draft
        # SGLang's spec v2 beside the overlap scheduler (engines.sglang.sglang_spec_v2): the
        # host's next round overlaps this round's GPU work (token_s); False: spec v1, serial.
        # The target is built with its own overlap rule off (its steps' host serial), so a
        # verification's GPU seconds are its total less its host_s
        self.overlap = overlap
        # SGLang's --speculative-skip-dp-mlp-sync (MLP_SYNCS_DECODE_SKIPPED)
        self.skip_dp_mlp_sync = skip_dp_mlp_sync
        r = speculation.request
        self.k, self.topk, self.queries = r.num_steps, r.topk, r.verify_tokens
        # the round's first draft forward runs the k + 1 positions a verification can settle,
        # whatever the tree verified: SGLang's draft extend after decode takes
        # speculative_num_steps + 1 tokens a sequence (eagle_worker.py
        # forward_draft_extend_after_decode's num_tokens_per_req, and the num_tokens_per_bs
        # eagle_draft_extend_cuda_graph_runner.py captures); vLLM's chain verifies k + 1 too
        self.extend_queries = r.num_steps + 1
        # SGLang's round host work beside the verification's (round_host_s)
        self.sglang_host = sglang_host
        self.share = speculation.draft_layers / target.spec.num_layers
        spec = target.spec
        # the draft head is the target's vocab-parallel head: over its TP group, or under
        # SGLang's DP attention over the whole group on the ranks' gathered rows (group_tp)
        self.head_bytes = (
            spec.head_params * part_bytes_per_param(spec, target.weights_dtype, "lm_head")
        ) / target.group_tp
        self.head_flop_per_token = 2 * spec.head_params / target.group_tp
        # SGLang commits each verified sequence's recurrent state once the verification is done
        # (hybrid_linear_attn_backend.update_mamba_state_after_mtp_verify: the accepted
        # position's SSM state and conv window gathered from the verification's intermediate
        # caches and scattered into the state pool, every linear layer at once); no kernel
        # table times that copy, so it is the state's bytes on the tables' memory roof, untimed
        self.state_commit_bytes = (
            STATE_COMMIT_PASSES * target.state_bytes_per_sequence
            if sglang_host and spec.state_layers()
            else 0.0
        )

    def __getattr__(self, name):
        """The target's coefficients (cuda_graph_max_tokens, dp_gather_full, async_scheduling,
        ...): data only. A method this class does not define is an AttributeError, never the
        target's own pricing passed through without the speculative round (a StepModel method
        added later must be defined here, as step, decode_span_s and without_graphs are)."""
        if name.startswith("__") or name == "target":  # copies and pickles: not the target's
            raise AttributeError(name)
        value = getattr(self.target, name)
        if callable(value):
            raise AttributeError(
                f"SpeculativeStepModel does not define {name!r}: the target's would price it "
                "without speculation"
            )
        return value

    @property
    def untimed_parts(self) -> tuple[str, ...]:
        """The target's parts no kernel table times (StepModel.untimed_parts), SGLang's
        recurrent-state commit after each verification (state_commit_s), then a separate
        draft model's, named as the draft's."""
        draft = self.draft.untimed_parts if self.draft is not None else ()
        commit = ("the recurrent-state commit after each verification",)
        return (
            *self.target.untimed_parts,
            *(commit if self.state_commit_bytes else ()),
            *(f"the draft's {p.removeprefix('the ')}" for p in draft),
        )

    def mlp_sync_s(self) -> float:
        """One scheduler sync of SGLang's DP-attention ranks (MLP_SYNC_BYTES from each of the
        group's G GPUs, a ring all-gather at the tables' measured all-gather call:
        StepModel._allgather_s); 0 without DP attention or for vLLM. The D2H copy of the
        gathered tensor that follows (_process_gathered_info's .cpu()) is not priced."""
        if not self.sglang_host or not self.target.dp_gather_full:
            return 0.0
        ranks = self.target.group_tp
        return self.target._allgather_s(MLP_SYNC_BYTES * (ranks - 1), ranks)

    @property
    def decode_mlp_syncs(self) -> int:
        """Scheduler syncs a decode round runs (MLP_SYNCS_DECODE; skipped: one)."""
        return MLP_SYNCS_DECODE_SKIPPED if self.skip_dp_mlp_sync else MLP_SYNCS_DECODE

    def state_commit_s(self, num_decodes: int) -> float:
        """Seconds of SGLang's recurrent-state commit after a verification of `num_decodes`
        sequences: each one's state read from the verification's cache and written to the
        pool (STATE_COMMIT_PASSES x the state's bytes) at the tables' attention bandwidth."""
        bandwidth = self.target.attention_rates.bandwidth_bytes_per_s
        return num_decodes * self.state_commit_bytes / bandwidth

    @property
    def borrowed_parts(self) -> tuple[str, ...]:
        """The target's parts timed from another GPU's rows (StepModel.borrowed_parts), then
        a separate draft model's, named as the draft's."""
        draft = self.draft.borrowed_parts if self.draft is not None else ()
        return (
            *self.target.borrowed_parts,
            *(f"the draft's {p.removeprefix('the ')}" for p in draft),
        )

    def without_graphs(self) -> SpeculativeStepModel:
        """The target and draft run eagerly (StepModel.without_graphs). Built once."""
        twin = self.__dict__.get("_eager")
        if twin is None:
            draft = self.draft.without_graphs() if self.draft is not None else None
            twin = SpeculativeStepModel(
                self.target.without_graphs(),
                self.speculation,
                draft,
                self.sglang_host,
                self.skip_dp_mlp_sync,
                self.overlap,
            )
            twin.__dict__["_eager"] = twin
            self.__dict__["_eager"] = twin
        return twin

    # ---- the draft --------------------------------------------------------------------------
    def _head_s(self, num_tokens: int, gathered_sampled: int | None = None) -> float:
        """The draft head over `num_tokens` sampled positions of this rank (under SGLang's DP
        attention over the ranks' gathered rows, `gathered_sampled` where the step gives them:
        StepModel._gathered_sampled)."""
        rows = self.target._gathered_sampled(num_tokens, num_tokens, None, gathered_sampled)
        return time_floor_s(
            self.head_bytes, self.head_flop_per_token * rows, self.target.dense_rates
        )

    def draft_step(
        self,
        num_decodes: int,
        context_sum: float,
        first: bool = False,
        gathered: int | None = None,
        padded: bool = False,
    ) -> StepTime:
        """One draft forward (GPU terms; n-gram: host work): over the decodes' topk branches,
        or (`first`) the round's first, over the k + 1 positions the verification just settled
        (vLLM's EAGLE/draft proposers and SGLang's draft extend run the accepted tokens
        through the draft before drafting on), sampling one token per sequence. `gathered`:
        the sequences of the DP-attention step across its ranks (a lockstep step's, padded
        under CUDA graphs; None: dp x this rank's), `padded` its MAX_LEN gather (_draft_rows)."""
        method = self.speculation.request.method
        if method == "ngram":
            host = self.target.host.per_request_s * num_decodes / self.k
            return engine_step_time(0, 0, 0, 0, 0, 0, 0, host, host)
        shape, queries = self._draft_shape(num_decodes, context_sum, first)
        per_seq = self.extend_queries if first else self.topk
        return self._draft_forward(shape, queries, gathered, first, padded, per_seq)

    def draft_extend(self, shape: BatchShape) -> StepTime:
        """What the draft's pass over a step's prefill chunks adds (GPU terms; the module's
        docstring cites the engines): alone, one draft forward over the chunks' tokens and a
        head row per chunk; beside decodes, the round's first draft forward with the chunks in
        it less that forward without them. Nothing for n-gram lookup or a step without chunks."""
        if not shape.prefill_chunks or self.speculation.request.method == "ngram":
            return engine_step_time(0, 0, 0, 0, 0, 0, 0, 0, 0)
        chunks = len(shape.prefill_chunks)
        if not shape.num_decodes:
            return self._draft_forward(BatchShape(0, 0.0, shape.prefill_chunks, chunks), 1)
        first, queries = self._draft_shape(shape.num_decodes, shape.decode_context_sum, True)
        both = first._replace(
            prefill_chunks=shape.prefill_chunks, num_sampled=first.num_sampled + chunks
        )
        return _linear(
            (self._draft_forward(both, queries, per_seq=queries), 1.0),
            (self._draft_forward(first, queries, per_seq=queries), -1.0),
        )

    def _draft_forward(
        self,
        shape: BatchShape,
        queries: int,
        gathered: int | None = None,
        first: bool = False,
        padded: bool = False,
        per_seq: int = 1,
    ) -> StepTime:
        """One draft forward over `shape` (`queries` tokens per decode), its GPU terms: a draft
        model's own step, or the target's `share` of layers with the draft head and its logits
        gather (`gathered`, `first`, `padded`: the DP-attention rows, draft_step's; `per_seq`:
        the tokens a sequence of the round runs in it, _graphed)."""
        if self.draft is not None:
            draft = self._graphed(self.draft, per_seq)
            return _gpu_only(_with(draft.step(shape, None, queries), sampler_s=0.0))
        tokens, sampled = self._draft_rows(gathered, first)
        target = self._graphed(self.target, per_seq)
        forward = target._forward(
            shape, self.share, tokens, queries, padded and tokens is not None, sampled
        )
        # the target's parts no table times run in its layers as the draft too (untimed_s)
        untimed_s, stand_in_s = target.forward_untimed_s(shape, forward, queries, tokens, sampled)
        weights_s, matmul_s, kv_read_s, attention_s, comm_s, launch_s = forward.terms
        weights_s += self._head_s(shape.num_sampled, sampled)
        # the draft's logits gathered as the target's are (EAGLE's draft forward runs the
        # LogitsProcessor: the TP all-gather, under SGLang's DP attention its group collectives)
        comm_s += self.target.logits_gather_s(shape.num_sampled, tokens, sampled)
        gpu_s = weights_s + matmul_s + kv_read_s + attention_s + comm_s + launch_s
        return engine_step_time(
            weights_s,
            matmul_s,
            kv_read_s,
            attention_s,
            0,
            comm_s,
            launch_s,
            0,
            gpu_s,
            untimed_s,
            stand_in_s,
        )

    def _draft_rows(self, gathered: int | None, first: bool) -> tuple[int | None, int | None]:
        """(tokens, sampled rows) of a draft forward of the target's layers across SGLang's
        DP-attention ranks, from the step's `gathered` sequences (None: the defaults of
        StepModel._gathered): per sequence, topk tokens each sampled, or (`first`, the draft
        extend) k + 1 tokens and one sampled. Under CUDA graphs the draft runners pad as the
        target's does: eagle_draft_cuda_graph_runner.py sets every rank's global_num_tokens
        and global_num_tokens_for_logprob to the graph's batch x topk (draft extend: x k + 1
        and the batch, eagle_draft_extend_cuda_graph_runner.py), gathered MAX_LEN
        (DpPaddingMode.get_default_mode_in_cuda_graph): the head and its logits gather run on
        every rank's padded rows, not on the sequences the ranks hold."""
        if gathered is None or not self.target.dp_gather_full:
            return None, None
        if first:
            return gathered * self.extend_queries, gathered
        return gathered * self.topk, gathered * self.topk

    def _draft_shape(self, num_decodes: int, context_sum, first: bool):
        """(the draft forward's shape, its queries per sequence)."""
        if first:
            return BatchShape(num_decodes, context_sum, (), num_decodes), self.extend_queries
        tokens = num_decodes * self.topk
        return BatchShape(tokens, context_sum * self.topk, (), tokens), 1

    def extend_in_batch(self):
        """The step model of a DP-attention step in which some rank runs an extend (prefill)
        batch: SGLang sets is_extend_in_batch on every rank's batch (prepare_mlp_sync_batch_raw)
        and its EAGLE worker then runs a decoding rank's batch as forward_target_extend +
        forward_draft_extend, no draft round (eagle_worker.py forward_batch_generation: "if
        batch.forward_mode.is_extend() or batch.is_extend_in_batch"); only under
        --speculative-skip-dp-mlp-sync do decodes share such a step. vLLM: this model."""
        if not self.sglang_host:
            return self
        twin = self.__dict__.get("_extend_twin")
        if twin is None:
            twin = self.__dict__["_extend_twin"] = _ExtendInBatch(self)
        return twin

    def extend_in_batch_decode(
        self,
        shape: BatchShape,
        gathered_tokens: int | None = None,
        padded: bool = False,
        gathered_sampled: int | None = None,
    ) -> StepTime:
        """A decoding rank's batch run as an extend (extend_in_batch): the target's forward over
        one token a sequence, the draft's over the same tokens with its head on each, one
        scheduler sync, and the draft pass's host work (prefill_host_s)."""
        target = self.target.step(
            shape, gathered_tokens, padded=padded, gathered_sampled=gathered_sampled
        )
        b = shape.num_decodes
        draft = (
            engine_step_time(0, 0, 0, 0, 0, 0, 0, 0, 0)
            if self.speculation.request.method == "ngram"
            else self._draft_forward(BatchShape(b, shape.decode_context_sum, (), b), 1)
        )
        out = _plus_comm(_linear((target, 1.0), (draft, 1.0)), self.mlp_sync_s())
        return _plus_host(out, self.prefill_host_s())

    # ---- SGLang's host work ------------------------------------------------------------------
    def round_host_s(self, num_decodes: int) -> float:
        """Host seconds a SGLang round adds to its verification's own host pass (that step's
        per_step_s + per_request_s a sequence), serial with the GPU (the overlap scheduler is
        off, spec v1): SGLANG_DRAFT_PASSES more passes of per_step_s (none for NGRAM, which
        runs no draft forward: ngram_worker.py), and per_request_s for each token a sequence
        emits past the first (EagleVerifyInput.verify appends every accepted token and runs
        req.check_finished on it in a Python loop over the requests): (E - 1) x
        per_request_s x the sequences. 0 for vLLM."""
        if not self.sglang_host:
            return 0.0
        host = self.target.host
        passes = 0 if self.speculation.request.method == "ngram" else SGLANG_DRAFT_PASSES
        extra_tokens = self.speculation.tokens_per_round - 1.0
        return passes * host.per_step_s + host.per_request_s * num_decodes * extra_tokens

    def token_s(self, draft_s, verify_s, first_s, verify_host_s: float, num_decodes: int):
        """Seconds of one decode step, a round of `num_decodes` sequences / E, from its draft
        step's, verification's and first draft step's seconds (floats, or a decode span's
        arrays; the verification's with its own host pass `verify_host_s` serial in it, the
        drafts GPU work alone) and the round's host work beside them (round_host_s). Spec v1
        (and vLLM): all serial, (speculative_round_s + round_host_s) / E. Spec v2 beside the
        overlap scheduler (SGLANG_V2_EXPOSED_PASSES): speculative_overlap_round_s / E, the
        host's round (verification pass + round_host_s) overlapping the GPU's, and the
        verification's pass, which prepares the next round after waiting for this one's
        verification, overlapping only the draft extend that follows the verification."""
        e, extra_s = self.speculation.tokens_per_round, self.round_host_s(num_decodes)
        if not self.overlap:
            return speculative_round_s(draft_s, verify_s, self.k, first_s) / e + extra_s / e
        round_s = speculative_overlap_round_s(
            draft_s,
            verify_s - verify_host_s,
            self.k,
            first_s,
            verify_host_s + extra_s,
            SGLANG_V2_EXPOSED_PASSES * verify_host_s,
        )
        return round_s / e

    def prefill_host_s(self) -> float:
        """Host seconds SGLang's draft pass over a prefill batch adds (forward_draft_extend
        builds its own ForwardBatch and runs draft_model_runner.forward after the target's
        extend): one per_step_s; none for NGRAM or vLLM."""
        if not self.sglang_host or self.speculation.request.method == "ngram":
            return 0.0
        return self.target.host.per_step_s

    def _graphed(self, model: StepModel, tokens_per_seq: int) -> StepModel:
        """`model` as a SGLang speculative forward running `tokens_per_seq` tokens a sequence
        replays its graph: while its sequences fit the largest captured batch, whatever its
        tokens (cuda_graph_runner.py can_run: batch size <= max_bs; the runners capture
        max_bs x num_tokens_per_bs tokens: the verification's num_draft_tokens, the draft's
        topk, eagle_draft_cuda_graph_runner.py, the draft extend's steps + 1,
        eagle_draft_extend_cuda_graph_runner.py), where the model's own limit counts tokens
        (SGLang's a plain decode's, one a sequence). vLLM: `model` as it is."""
        if not self.sglang_host or tokens_per_seq <= 1:
            return model
        # built once, held by `model` itself (StepModel.with_graph_tokens): a cache keyed by
        # id(model) could hand a twin of a collected model to another at its address
        return model.with_graph_tokens(model.cuda_graph_max_tokens * tokens_per_seq)

    # ---- the step ---------------------------------------------------------------------------
    def step(
        self,
        shape: BatchShape,
        gathered_tokens: int | None = None,
        queries: int = 1,
        padded: bool = False,
        gathered_sampled: int | None = None,
    ) -> StepTime:
        if not shape.num_decodes:
            target = self.target.step(
                shape, gathered_tokens, padded=padded, gathered_sampled=gathered_sampled
            )
            prefill = _linear((target, 1.0), (self.draft_extend(shape), 1.0))
            prefill = _plus_comm(prefill, self.mlp_sync_s())  # one sync a prefill batch
            prefill = _plus_host(prefill, self.prefill_host_s())
            # spec v2: the batch's host pass overlaps the GPU's previous batch, as the overlap
            # scheduler's steps do (StepModel.step: max(gpu, host))
            return _host_overlapped(prefill) if self.overlap else prefill
        b = shape.num_decodes
        gathered = None if gathered_tokens is None else gathered_tokens * self.queries
        # the verification samples every query position (the head's gathered rows likewise)
        sampled = None if gathered_sampled is None else gathered_sampled * self.queries
        decodes = BatchShape(b, shape.decode_context_sum, (), b * self.queries)
        verifier = self._graphed(self.target, self.queries)
        verify = verifier.step(decodes, gathered, self.queries, padded, sampled)
        verify = _plus_untimed_memory(verify, self.state_commit_s(b))
        # the draft forwards across the ranks: the step's sequences (its sampled rows, padded
        # to the graph's batch under CUDA graphs: Engine.lockstep_batch)
        seqs = gathered_tokens if gathered_sampled is None else gathered_sampled
        draft = self.draft_step(b, shape.decode_context_sum, False, seqs, padded)
        first = self.draft_step(b, shape.decode_context_sum, True, seqs, padded)
        e = self.speculation.tokens_per_round
        token_s = self.token_s(
            draft.total_s, verify.total_s, first.total_s, verify.terms_s["host_s"], b
        )
        one = _round(verify, draft, first, self.k, e, float(token_s))
        one = _with(one, host_s=one.terms_s["host_s"] + self.round_host_s(b) / e)
        one = _plus_comm(one, self.decode_mlp_syncs * self.mlp_sync_s() / e)
        if not shape.prefill_chunks:
            return one
        mixed = verifier.step(
            shape._replace(num_sampled=b * self.queries + len(shape.prefill_chunks)),
            gathered,
            self.queries,
            padded,
        )
        return _linear((one, 1.0), (mixed, 1.0), (verify, -1.0), (self.draft_extend(shape), 1.0))

    def decode_span_s(
        self,
        num_decodes: int,
        context_sums,
        queries: int = 1,
        gathered_tokens: int | None = None,
        padded: bool = False,
    ):
        import numpy as np

        sums = np.asarray(context_sums, dtype=float)
        if self.target.pp > 1 and num_decodes > 1:
            steps = [
                self.step(
                    BatchShape(num_decodes, float(x), (), num_decodes), gathered_tokens, 1, padded
                )
                for x in sums
            ]

            def kept_steps(n: int) -> StepTime:
                return _linear(*((t, 1.0) for t in steps[:n]))

            return np.array([t.total_s for t in steps]), kept_steps
        e, k = self.speculation.tokens_per_round, self.k
        gathered = None if gathered_tokens is None else gathered_tokens * self.queries
        times, span_kept = self._graphed(self.target, self.queries).decode_span_s(
            num_decodes, sums, self.queries, gathered, padded
        )
        commit_s = self.state_commit_s(num_decodes)
        times = times + commit_s

        def verify_kept(n: int) -> StepTime:
            return _plus_untimed_memory(span_kept(n), commit_s * n)

        draft_times, draft_kept = self._draft_span(
            num_decodes, sums, False, gathered_tokens, padded
        )
        first_times, first_kept = self._draft_span(num_decodes, sums, True, gathered_tokens, padded)
        host_s = self.round_host_s(num_decodes) / e
        sync_s = self.decode_mlp_syncs * self.mlp_sync_s() / e
        # the verification's own host pass, the same at every context (StepModel.step)
        verify_host_s = span_kept(1).terms_s["host_s"] if len(sums) else 0.0
        token_times = self.token_s(draft_times, times, first_times, verify_host_s, num_decodes)
        token_times = token_times + sync_s

        def kept(n: int) -> StepTime:
            out = _linear(
                (verify_kept(n), 1.0 / e), (draft_kept(n), (k - 1) / e), (first_kept(n), 1.0 / e)
            )
            out = _plus_comm(_plus_host(out, host_s * n), sync_s * n)
            # spec v2: the terms as spent, the total the overlapped rounds' (token_s)
            return _with(out, float(token_times[:n].sum())) if self.overlap else out

        return token_times, kept

    def _draft_span(
        self,
        num_decodes: int,
        sums,
        first: bool,
        gathered: int | None = None,
        padded: bool = False,
    ):
        """draft_step at each of a decode span's context sums: (times, an array; the terms of
        the first n, a function)."""
        import numpy as np

        if self.speculation.request.method == "ngram":
            draft = self.draft_step(num_decodes, 0.0)
            return np.full_like(sums, draft.total_s), lambda n: _linear((draft, float(n)))
        model, share = (self.draft, 1.0) if self.draft is not None else (self.target, self.share)
        shape, queries = self._draft_shape(num_decodes, 0.0, first)
        scale = 1 if first else self.topk
        model = self._graphed(model, self.extend_queries if first else self.topk)
        tokens, sampled = self._draft_rows(gathered, first) if self.draft is None else (None, None)
        padded = padded and tokens is not None
        base, attention = model.span_parts(shape.num_decodes, sums * scale, queries, tokens, padded)
        head = 0.0 if self.draft is not None else self._head_s(shape.num_sampled, sampled)
        # every term but attention is the same at any context (StepModel.span_parts); span_parts
        # samples every query position, a draft forward one per sequence: its own GEMMs and
        # logits gather here (a draft model's step, or the target's own layers as the draft,
        # draft_step, gathers its samples' logits)
        weights_s, matmul_s = model.gemm_s(
            queries * shape.num_decodes, shape.num_sampled, tokens, sampled
        )
        own_gather = model.logits_gather_s(shape.num_sampled, tokens, sampled)
        # the target's layers as the draft: their share scales the layers, not the head's gather
        scaled_gather, head_gather = (
            (own_gather, 0.0) if self.draft is not None else (0.0, own_gather)
        )
        comm_s = (
            base.terms_s["comm_s"]
            - model.logits_gather_s(queries * shape.num_decodes, tokens)
            + scaled_gather
        )
        fixed = _gpu_only(
            _with(
                base,
                weights_s=weights_s,
                matmul_s=matmul_s,
                kv_read_s=0.0,
                attention_s=0.0,
                sampler_s=0.0,
                comm_s=comm_s,
            )
        )
        # its untimed seconds those of these GEMMs, its attention's added by step (kept)
        gemms = (weights_s, matmul_s, 0.0, 0.0)
        fixed = fixed._replace(
            untimed_s=model.untimed_s(
                gemms, queries * shape.num_decodes, shape.num_sampled, tokens, sampled
            )
        )
        untimed_attention = "attention" in model.untimed_terms
        fixed = _linear((fixed, share))
        fixed = _with(
            fixed,
            fixed.total_s + head + head_gather,
            weights_s=fixed.terms_s["weights_s"] + head,
            comm_s=fixed.terms_s["comm_s"] + head_gather,
        )

        def kept(n: int) -> StepTime:
            seconds = float(share * attention[:n].sum())
            out = _linear((fixed, float(n)))
            out = out._replace(untimed_s=out.untimed_s + (seconds if untimed_attention else 0.0))
            return _with(out, out.total_s + seconds, kv_read_s=out.terms_s["kv_read_s"] + seconds)

        return fixed.total_s + share * attention, kept


class _ExtendInBatch:
    """SpeculativeStepModel.extend_in_batch: the one call a lockstep step makes of its model
    (batch_step.lockstep_step: `step`), a decode-only batch priced as extend_in_batch_decode,
    every other batch as the model does. Nothing else is the model's: no attribute forwards
    (a method added to the step models is an AttributeError here, never the model's own
    pricing passed through unchanged)."""

    __slots__ = ("model",)

    def __init__(self, model: SpeculativeStepModel):
        self.model = model

    def step(
        self,
        shape: BatchShape,
        gathered_tokens: int | None = None,
        queries: int = 1,
        padded: bool = False,
        gathered_sampled: int | None = None,
    ) -> StepTime:
        if shape.num_decodes and not shape.prefill_chunks:
            return self.model.extend_in_batch_decode(
                shape, gathered_tokens, padded, gathered_sampled
            )
        return self.model.step(shape, gathered_tokens, queries, padded, gathered_sampled)


def _with(step: StepTime, total_s: float | None = None, **terms_s: float) -> StepTime:
    """The step with the terms named replaced (and its total, given one)."""
    total = step.total_s if total_s is None else total_s
    return step._replace(total_s=total, terms_s={**step.terms_s, **terms_s})


def _plus_host(step: StepTime, host_s: float) -> StepTime:
    """The step with `host_s` more host time, serial with its GPU time (SGLang's speculative
    rounds run with the overlap scheduler off)."""
    if not host_s:
        return step
    return _with(step, step.total_s + host_s, host_s=step.terms_s["host_s"] + host_s)


def _host_overlapped(step: StepTime) -> StepTime:
    """The step with its host pass overlapping the GPU's work (the overlap scheduler: a step's
    total max(gpu, host), as StepModel.step prices it), from a step whose host ran serially."""
    host_s = step.terms_s["host_s"]
    return _with(step, max(step.total_s - host_s, host_s))


def _plus_comm(step: StepTime, seconds: float) -> StepTime:
    """The step with `seconds` more of collective time, serial with the rest (SGLang's
    speculative rounds: no overlap scheduler)."""
    if not seconds:
        return step
    return _with(step, step.total_s + seconds, comm_s=step.terms_s["comm_s"] + seconds)


def _plus_untimed_memory(step: StepTime, seconds: float) -> StepTime:
    """The step with `seconds` more of memory-bound GPU work no kernel table times (kv_read_s,
    untimed_s), serial with the rest (SGLang's speculative rounds: no overlap scheduler)."""
    if not seconds:
        return step
    out = _with(step, step.total_s + seconds, kv_read_s=step.terms_s["kv_read_s"] + seconds)
    return out._replace(untimed_s=step.untimed_s + seconds)


def _gpu_only(step: StepTime) -> StepTime:
    """A step's GPU terms alone (a draft forward runs inside the engine step: no host pass)."""
    gpu = sum(step.terms_s[f] for f in GPU_TERMS)
    return _with(step, gpu, host_s=0.0)


def _linear(*pairs) -> StepTime:
    """Σ weight x terms, term by term, and the total likewise."""
    return StepTime(
        sum(w * t.total_s for t, w in pairs),
        {f: sum(w * t.terms_s[f] for t, w in pairs) for f in ENGINE_TERMS},
        untimed_s=sum(w * t.untimed_s for t, w in pairs),
        stand_in_launch_s=sum(w * t.stand_in_launch_s for t, w in pairs),
    )


def _round(
    verify: StepTime, draft: StepTime, first: StepTime, k: int, e: float, token_s: float
) -> StepTime:
    """One decode step's share of a round: its terms (the first draft forward + k - 1 more +
    the verification) / E, term by term, and its total `token_s`
    (SpeculativeStepModel.token_s)."""
    out = _linear((verify, 1.0 / e), (draft, (k - 1) / e), (first, 1.0 / e))
    return out._replace(total_s=token_s)


def requested(spec: ModelSpec, options) -> SpecDecode | None:
    """The speculative decoding a replica's ServeOptions ask for (None: none), in the engine's
    spelling: vLLM's --speculative-config, SGLang's --speculative-* flags."""
    if options.speculative_skip_dp_mlp_sync:
        # arg_groups/speculative_hook.py (server_args' handle_speculative_decoding): asserted
        # after NEXTN becomes EAGLE, so EAGLE and NEXTN alone
        algorithm = str(options.speculative_algorithm or "").strip().upper()
        if options.engine != "sglang" or algorithm not in ("EAGLE", "NEXTN"):
            raise KvplanError(
                "--speculative-skip-dp-mlp-sync is SGLang's, with --speculative-algorithm EAGLE "
                "(or NEXTN) only"
            )
        from kvplan.engines.sglang import check_skip_dp_mlp_sync_release

        check_skip_dp_mlp_sync_release(options.sglang_version)
    sglang_flags = (
        options.speculative_num_steps,
        options.speculative_eagle_topk,
        options.speculative_num_draft_tokens,
        options.speculative_draft_model_path,
    )
    if options.speculative_config is not None:
        if options.engine == "sglang":
            raise KvplanError(
                "--speculative-config is vLLM's; SGLang takes --speculative-algorithm and "
                "--speculative-num-steps/-eagle-topk/-num-draft-tokens"
            )
        if options.speculative_algorithm is not None or any(x is not None for x in sglang_flags):
            raise KvplanError(
                "give --speculative-config or SGLang's --speculative-* flags, not both"
            )
        return parse_vllm(options.speculative_config, spec)
    if options.speculative_algorithm is None:
        if any(x is not None for x in sglang_flags):
            raise KvplanError("the --speculative-* flags need --speculative-algorithm")
        if options.spec_accept is not None or options.spec_accept_length is not None:
            raise KvplanError(
                "--spec-accept prices speculative decoding: give --speculative-config (vLLM) "
                "or --speculative-algorithm (SGLang)"
            )
        return None
    if options.engine != "sglang":
        raise KvplanError(
            "--speculative-algorithm is SGLang's; vLLM takes --speculative-config '<JSON>'"
        )
    return parse_sglang(options.speculative_algorithm, *sglang_flags, spec)


def resolve(
    spec: ModelSpec, request: SpecDecode, options, fmt, weights_dtype: str, tp: int
) -> tuple[Speculation, ModelSpec | None]:
    """(the replica's Speculation, the draft model's spec for draft_model), its sizes per GPU."""
    from kvplan.formulas.kv import kv_bytes_per_token
    from kvplan.formulas.weights import resolve_weights_dtype, weights_bytes_per_gpu

    e, how, rate = parse_accept(options.spec_accept, options.spec_accept_length, request)
    draft_spec = None
    layers, weight_bytes, kv_bytes = 0, 0.0, 0.0
    if request.method == "mtp":
        count = check_mtp(spec, request)
        layers = 1  # each draft step runs one MTP layer (the next, or the last again)
        last = spec.attention_layers()[-1]
        weight_bytes = count * layer_weight_bytes(spec, weights_dtype) / tp
        kv_bytes = count * last.kv_bytes_per_token(fmt, tp)
    elif request.method in ("eagle", "eagle3"):
        layers = 1  # one decoder layer at the target's width, the target's LM head
        dense = spec._replace(moe=None) if spec.moe is None else _dense_layer_spec(spec)
        weight_bytes = layer_weight_bytes(dense, weights_dtype) / tp
        kv_bytes = spec.attention_layers()[-1].kv_bytes_per_token(fmt, tp)
    elif request.method == "draft_model":
        draft_spec = check_draft_model(spec, request, options)
        draft_spec.check_tp(tp)
        draft_wdtype = resolve_weights_dtype(draft_spec, "auto")[0]
        weight_bytes = weights_bytes_per_gpu(draft_spec, draft_wdtype, tp)
        kv_bytes = kv_bytes_per_token(draft_spec, fmt, tp)
    draft_id = request.draft if draft_spec is None else draft_spec.hf_id or request.draft
    speculation = Speculation(
        request, e, how, rate, layers, weight_bytes, kv_bytes, request.verify_tokens - 1, draft_id
    )
    return speculation, draft_spec


def _dense_layer_spec(spec: ModelSpec) -> ModelSpec:
    """An EAGLE head on a MoE target: a dense layer of the target's width, its MLP as wide as
    the config's dense intermediate size (else 4 x hidden)."""
    width = spec.intermediate_size or 4 * spec.hidden_size
    parts = {k: v for k, v in spec.param_parts.items() if k not in ("experts", "router")}
    parts.pop("shared_experts", None)
    parts["mlp"] = 3 * spec.hidden_size * width * spec.num_layers
    return spec._replace(moe=None, param_parts=parts)


def launch_flags(request: SpecDecode, engine: str, draft_id: str | None = None) -> list[str]:
    """The flags that ask the engine for this speculative decoding; `draft_id`: what to name
    the draft model by (a resolved replica's Speculation.draft_id), else the draft as given."""
    draft = request.draft if draft_id is None else draft_id
    if engine == "vllm":
        # the config as given (its method's spelling, its other keys), the method named where
        # it was left to the model ("[ngram]"): plan's summary reads it
        config: dict = {"method": request.method, **json.loads(request.config or "{}")}
        if draft is not None:
            config["model"] = draft
        config.setdefault("num_speculative_tokens", request.num_steps)
        return ["--speculative-config", json.dumps(config, separators=(",", ":"))]
    algorithm = {"mtp": "EAGLE", "eagle": "EAGLE", "eagle3": "EAGLE3"}.get(request.method)
    algorithm = algorithm or {"draft_model": "STANDALONE", "ngram": "NGRAM"}[request.method]
    flags = ["--speculative-algorithm", algorithm]
    if request.method != "ngram":
        flags += [
            "--speculative-num-steps",
            str(request.num_steps),
            "--speculative-eagle-topk",
            str(request.topk),
        ]
    flags += ["--speculative-num-draft-tokens", str(request.verify_tokens)]
    if draft is not None:
        flags += ["--speculative-draft-model-path", draft]
    return flags
