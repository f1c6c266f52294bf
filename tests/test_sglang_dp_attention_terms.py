"""SGLang's DP-attention step terms for DeepSeek-V3 at --tp 8 --dp-size 8 --enable-dp-attention on
an H200, by hand from SGLang's source (sglang/srt/layers/dp_attention.py, communicator.py,
logits_processor.py, models/deepseek_v2.py; scheduler_dp_attn_mixin.prepare_mlp_sync_batch_raw):
each rank attends its own batch at attention TP 1; every layer's MLP (3 dense MLPs, 58 shared
experts), the router and the head run over all 8 GPUs on the rows gathered from the 8 ranks."""

from __future__ import annotations

import pytest

from kvplan.engines.sglang import cuda_graph_batch_sizes, graph_batch_size
from kvplan.formulas.batch_step import (
    BatchShape,
    StepModel,
    lockstep_gathered_tokens,
    lockstep_step,
)
from kvplan.formulas.expert_parallel import sglang_dp_max_len
from kvplan.formulas.gemm_calls import dense_gemm_calls
from kvplan.formulas.weights import quantized_parts
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model
from kvplan.simulate.engine import EngineConfig
from kvplan.simulate.sglang import SglangEngine

from helpers import deepseek_v3_dp8_step

HIDDEN, VOCAB, LAYERS = 7168, 129_280, 61
# DeepSeek-V3's MLP side: 3 dense MLPs of 3 x 7168 x 18432 and 58 shared experts of
# 3 x 7168 x 2048 parameters; its head 129,280 x 7168 (bf16 in the fp8 checkpoint)
MLP_PARAMS = 3 * 3 * HIDDEN * 18432 + 58 * 3 * HIDDEN * 2048
# the 58 MoE layers' routers (MoEGate: 256 experts x 7168, bf16), replicated on every GPU
ROUTER_PARAMS = 58 * 256 * HIDDEN
HEAD_PARAMS = VOCAB * HIDDEN


@pytest.fixture(scope="module")
def sglang() -> StepModel:
    return deepseek_v3_dp8_step(sglang_collectives=True)


@pytest.fixture(scope="module")
def vllm_rule() -> StepModel:
    return deepseek_v3_dp8_step(sglang_collectives=False)


def test_the_model_is_deepseek_v3():
    spec = load_model("deepseek-v3")
    assert (spec.hidden_size, spec.vocab_size, spec.num_layers) == (HIDDEN, VOCAB, LAYERS)
    assert spec.param_parts["mlp"] + spec.param_parts["shared_experts"] == MLP_PARAMS
    assert spec.head_params == HEAD_PARAMS == 926_679_040


def test_padding_mode_and_buffer_rows_of_three_ranks():
    """get_dp_padding_mode: MAX_LEN where 2 x sum > ranks x max, never with a prefill. Ranks of
    5, 1 and 0 (idle) tokens: 2 x 6 = 12 <= 3 x 5 = 15, SUM_LEN, a buffer of 6 rows; 5, 5 and 4:
    28 > 15, MAX_LEN, 3 x 5 = 15 rows; the same with a prefill on a rank: SUM_LEN, 14 rows."""
    assert not sglang_dp_max_len([5, 1, 0], extend=False)
    assert lockstep_gathered_tokens([5, 1, 0], False) == 6
    assert sglang_dp_max_len([5, 5, 4], extend=False)
    assert lockstep_gathered_tokens([5, 5, 4], True) == 15
    assert not sglang_dp_max_len([5, 5, 4], extend=True)
    assert lockstep_gathered_tokens([5, 5, 4], False) == 14


def test_gather_bytes_per_layer_by_padding_mode(sglang):
    """Eight ranks. SUM_LEN (5, 1 and six idle ranks: 2 x 6 <= 8 x 5): the 6 rows zero-filled but
    for the rank's own, all-reduced over the 8 GPUs before each of the 61 layers' MLP and the
    MLP's output all-reduced after it: 2 x 61 ring all-reduces of 6 x 7168 x 2 = 86,016 B.
    MAX_LEN (seven ranks of 5, one of 4: 2 x 39 > 8 x 5): 8 x 5 = 40 rows, all_gather_into_tensor
    then reduce_scatter_tensor, each GPU receiving (and sending) the other 7 slices of 5 rows,
    7 x 5 x 7168 x 2 = 501,760 B a collective, with 7 hop latencies each."""
    m = sglang
    link = load_profile("h200").interconnect
    one_way = link.one_way_bytes_per_s * m.achieved.link
    assert not sglang_dp_max_len([5, 1, 0, 0, 0, 0, 0, 0], extend=False)
    summed = 6 * HIDDEN * 2
    assert summed == 86_016
    allreduce = m.achieved.allreduce_s(summed, 8)  # the engine's, as timed at 8 GPUs
    assert m.comm_s(5, 6) == pytest.approx(2 * LAYERS * allreduce, rel=1e-12)
    assert sglang_dp_max_len([5, 5, 5, 5, 5, 5, 5, 4], extend=False)
    received = 7 * 5 * HIDDEN * 2
    assert received == 501_760
    padded = 2 * LAYERS * (received / one_way + 7 * link.latency_s)
    assert m.comm_s(5, 40, padded=True) == pytest.approx(padded, rel=1e-12)


def test_head_collectives_of_a_lockstep_step(sglang, vllm_rule):
    """The head (LogitsProcessor._get_logits, SUM_LEN of the sampled rows, never padded): the 6
    sampled hidden states of ranks of 5 and 1 decodes (six idle, sampling none) all-reduced over
    the 8 GPUs (86,016 B), the head run on the 6 rows at 129,280 / 8 = 16,160 columns a GPU,
    the logits all-gathered over the 8: each GPU receives 7/8 of 6 x 129,280 x 2 B = 1,357,440 B.
    vLLM's rule at attention TP 1 gathers no logits."""
    m = sglang
    link = load_profile("h200").interconnect
    one_way = link.one_way_bytes_per_s * m.achieved.link
    call = m.achieved.allreduce_call_s_at(8)  # the group of 8
    gather_call = m.achieved.allgather_call_s or call
    logits = 6 * VOCAB * 2 * 7 / 8
    assert logits == 1_357_440
    head = m.achieved.allreduce_s(86_016, 8) + (logits / one_way + gather_call)
    assert m.logits_gather_s(5, 6, 6) == pytest.approx(head, rel=1e-12)
    assert vllm_rule.logits_gather_s(5, 6, 6) == 0.0
    shapes = [BatchShape(5, 5000.0, (), 5), BatchShape(1, 1000.0, (), 1)]
    step, slowest = lockstep_step(m, shapes, 6, False, gathered_tokens=6, gathered_sampled=6)
    assert slowest == 0
    assert step.terms_s["comm_s"] == pytest.approx(m.comm_s(5, 6) + head, rel=1e-12)


def test_mlps_and_head_run_over_the_whole_group(sglang, vllm_rule):
    """The dense MLPs, shared experts and head split over the 8 GPUs (weights and FLOPs / 8) and
    the routers whole on every GPU, all on the gathered rows, the attention at its own TP 1 on
    the rank's own rows: one rank reads 7/8 of the MLPs' fp8 weights (3,743,416,320 parameters
    and their block scales) and of the bf16 head's 1,853,358,080 B less than under vLLM's rule
    at the same layout."""
    m, v = sglang, vllm_rule
    assert (m.group_tp, v.group_tp) == (8, 1)
    coef = m.coefficients
    assert coef.head_bytes == HEAD_PARAMS * 2 == 1_853_358_080
    assert coef.mlp_bytes == pytest.approx(MLP_PARAMS, rel=1e-3)  # ~1 B a parameter
    saved = v.weights_bytes(5, 6)[0] - m.weights_bytes(5, 6)[0]
    assert saved == pytest.approx(7 / 8 * (coef.mlp_bytes + coef.head_bytes), rel=1e-12)
    assert m.weights_bytes(5, 6)[1] == v.weights_bytes(5, 6)[1]  # the routed experts' alike
    assert coef.router_bytes == pytest.approx(2 * ROUTER_PARAMS, rel=1e-3)  # bf16, whole
    # FLOPs: the MLPs' 2 per parameter per gathered token over 8 GPUs, the routers' 2 per
    # parameter per gathered token on every GPU (deepseek_v2.py MoEGate: F.linear of the
    # gathered hidden states with the whole weight), the head's per sampled row
    assert m.mlp_flop_per_gathered_token == pytest.approx(
        2 * MLP_PARAMS / 8 + 2 * ROUTER_PARAMS, rel=1e-3
    )
    assert v.mlp_flop_per_gathered_token == 0.0
    assert v.dense_flop_per_token - m.dense_flop_per_token == pytest.approx(
        2 * (MLP_PARAMS + ROUTER_PARAMS), rel=1e-3
    )
    # a step of 5 own tokens among 40 gathered: the routers' FLOPs on the 40
    own, gathered = 5, 40
    flops_m = m.dense_flop_per_token * own + m.mlp_flop_per_gathered_token * gathered
    flops_v = v.dense_flop_per_token * own
    assert flops_m - flops_v == pytest.approx(
        2 * (MLP_PARAMS / 8 + ROUTER_PARAMS) * gathered - 2 * (MLP_PARAMS + ROUTER_PARAMS) * own,
        rel=1e-3,
    )
    assert m.head_flop_per_sample == 2 * HEAD_PARAMS / 8
    assert v.head_flop_per_sample == 2 * HEAD_PARAMS


def test_gemm_calls_at_the_group_tp():
    """dense_gemm_calls with group_tp 8: the dense MLP's gate|up 2 x 18432 / 8 = 4,608 by 7168
    and down 7168 by 2,304, the shared experts' 2 x 2048 / 8 = 512 and 7168 by 256, the router
    and the head (16,160 columns) on the gathered rows; MLA's projections at TP 1 on the rank's."""
    spec = load_model("deepseek-v3")
    calls = dense_gemm_calls(spec, "fp8", quantized_parts(spec, "fp8"), 1, 8)
    assert calls is not None
    gathered = {(c.n, c.k, c.times, c.head) for c in calls if c.gathered}
    assert gathered == {
        (4608, HIDDEN, 3, False),
        (HIDDEN, 2304, 3, False),
        (256, HIDDEN, 58, False),  # the router, replicated
        (512, HIDDEN, 58, False),
        (HIDDEN, 256, 58, False),
        (16_160, HIDDEN, 1, True),
    }
    own = [c for c in calls if not c.gathered]
    assert own and all(not c.head for c in own)
    # without a group: every call on the rank's own rows, the MLPs and head at TP 1
    plain = dense_gemm_calls(spec, "fp8", quantized_parts(spec, "fp8"), 1)
    assert plain is not None and not any(c.gathered for c in plain)
    shapes = {(c.n, c.k) for c in plain}
    assert (2 * 18432, HIDDEN) in shapes and (VOCAB, HIDDEN) in shapes


def test_cuda_graph_batch_sizes():
    """server_args._generate_cuda_graph_batch_sizes at --cuda-graph-max-bs 512 (an H200 at TP 8):
    1, 2, 4, 8, 12, 16-256 by 8, 272-496 by 16, 512: 5 + 31 + 15 + 1 = 52 sizes; with speculative
    decoding 1-8, 10-32 by 2, 40-64 by 4, 72-256 by 8, 272-512 by 16: 8 + 12 + 7 + 24 + 16 = 67."""
    sizes = cuda_graph_batch_sizes(512)
    assert len(sizes) == 52 and sizes[:6] == (1, 2, 4, 8, 12, 16) and sizes[-2:] == (496, 512)
    spec_sizes = cuda_graph_batch_sizes(512, speculative=True)
    assert len(spec_sizes) == 67 and spec_sizes[8:10] == (10, 12) and spec_sizes[-1] == 512
    assert [graph_batch_size(n, 512) for n in (1, 3, 5, 13, 17, 257, 512, 513)] == [
        1,
        4,
        8,
        16,
        24,
        272,
        512,
        None,
    ]


def test_a_lockstep_step_under_graphs_replays_the_largest_ranks_size(sglang):
    """cuda_graph_runner.replay under DP attention: every rank (an idle one too) replays the
    graph of the smallest captured size at least the largest rank's batch and sets every rank's
    token count to it: ranks of 5 and 1 decodes and six idle replay size 8, the MLPs and the
    head on 8 x 8 = 64 rows, gathered padded (all_gather_into_tensor of 8 rows a GPU), whatever
    the padding rule says eagerly (2 x 6 <= 8 x 5: SUM_LEN of 6 rows). A prefill on any rank
    runs every rank eagerly: SUM_LEN, the idle ranks adding no tokens."""
    engine = SglangEngine(EngineConfig(64, 8192, 4096, 1024, 64), sglang, 0.0)
    decodes = [BatchShape(5, 5000.0, (), 5), BatchShape(1, 1000.0, (), 1)]
    eager, pad = engine.lockstep_rules(decodes + [BatchShape()] * 6)
    assert (eager, pad) == (False, False)
    assert engine.lockstep_batch(decodes, 6, eager, pad) == (64, 64, True)
    assert engine.lockstep_batch(decodes, 6, True, pad) == (6, 6, False)
    prefill = [BatchShape(0, 0, ((300, 0),), 1), BatchShape(1, 1000.0, (), 1)]
    eager, pad = engine.lockstep_rules(prefill + [BatchShape()] * 6)
    assert (eager, pad) == (True, False)
    assert engine.lockstep_batch(prefill, 6, eager, pad) == (301, 2, False)


def test_the_mtp_draft_head_runs_over_the_group_and_gathers_its_logits(sglang):
    """SGLang's EAGLE draft (DeepSeek's MTP layer) computes its logits with the target's
    LogitsProcessor and vocab-parallel head: under DP attention over the 8 GPUs on the ranks'
    gathered rows (its bf16 head 1,853,358,080 / 8 B a GPU), its logits gathered as the
    target's are. A draft step of 5 decodes a rank (8 x 5 sampled rows gathered): the step's
    comm holds the head's collectives of 40 rows."""
    from kvplan.simulate.speculative import SpecDecode, Speculation, SpeculativeStepModel

    mtp = SpecDecode("mtp", 1, 1, 2, None)
    speculation = Speculation(mtp, 1.8, "length", None, 1, 0.0, 0.0, 1)
    model = SpeculativeStepModel(sglang, speculation, None)
    assert model.head_bytes == 1_853_358_080 / 8
    assert model.head_flop_per_token == 2 * HEAD_PARAMS / 8
    draft = model.draft_step(5, 5000.0)
    layers = sglang._forward(BatchShape(5, 5000.0, (), 5), model.share, None, 1).terms
    head = sglang.logits_gather_s(5, None, 40)
    assert head == sglang.logits_gather_s(5)  # 8 ranks x 5 rows by default
    assert draft.terms_s["comm_s"] == pytest.approx(layers[4] + head, rel=1e-12)


def test_the_draft_runs_on_the_rows_the_graphs_pad_to(sglang):
    """Under CUDA graphs SGLang's EAGLE draft runners pad as the target's does
    (speculative/eagle_draft_cuda_graph_runner.py: every rank's global_num_tokens and
    global_num_tokens_for_logprob set to the graph's batch x topk, gathered MAX_LEN;
    eagle_draft_extend_cuda_graph_runner.py: batch x (k + 1) tokens, the batch's rows to the
    head). Ranks of 5 and 1 decodes and six idle replay graph size 8 (Engine.lockstep_batch: 64
    sequences, padded): each MTP draft forward (topk 1) runs the head and its logits gather on
    8 x 8 = 64 rows, not on 8 x 5 = 40; the draft extend its layers on 64 x 2 tokens. The
    step and a decode span price their drafts so."""
    from kvplan.simulate.speculative import SpecDecode, Speculation, SpeculativeStepModel

    mtp = SpecDecode("mtp", 1, 1, 2, None)
    model = SpeculativeStepModel(
        sglang, Speculation(mtp, 1.8, "length", None, 1, 0.0, 0.0, 1), None
    )
    draft = model.draft_step(5, 5000.0, False, 64, True)
    layers = sglang._forward(BatchShape(5, 5000.0, (), 5), model.share, 64, 1, True, 64).terms
    gather = sglang.logits_gather_s(5, 64, 64)
    assert gather > sglang.logits_gather_s(5, None, 40) == sglang.logits_gather_s(5)
    assert draft.terms_s["comm_s"] == pytest.approx(layers[4] + gather, rel=1e-12)
    assert draft.terms_s["weights_s"] == pytest.approx(layers[0] + model._head_s(5, 64), rel=1e-12)
    first = model.draft_step(5, 5000.0, True, 64, True)
    extend = sglang._forward(BatchShape(5, 5000.0, (), 5), model.share, 128, 2, True, 64).terms
    assert first.terms_s["comm_s"] == pytest.approx(extend[4] + gather, rel=1e-12)
    step = model.step(BatchShape(5, 5000.0, (), 5), 64, 1, True, 64)
    verify = sglang.step(BatchShape(5, 5000.0, (), 10), 128, 2, True, 128)
    e = model.speculation.tokens_per_round
    assert step.total_s == pytest.approx((first.total_s + verify.total_s) / e, rel=1e-12)
    times, _ = model.decode_span_s(5, [5000.0], 1, 64, True)
    assert times[0] == pytest.approx(step.total_s, rel=1e-12)


def test_memory_defaults_and_weights_under_dp_attention():
    """server_args (0.5) with --tp 8 --dp-size 8 --enable-dp-attention on an H200: the bucket of
    the server's --tp 8 (chunked prefill 8,192, cuda_graph_max_bs 512), reserved 512 + 8,192 x
    1.5 + 512 x 2 + 8 / 8 x 1,024 + 1,536 (MLA's piecewise graphs) = 16,384 MiB, and for DP
    attention 512 x 8 x 3 + (512 > 300) 512 x 8 x 1.5 = 18,432 MiB more. A rank holds 1/8 of
    the dense MLPs, shared experts and head (deepseek_v2.py), all of the attention."""
    from kvplan.engines.sglang import default_mem_fraction
    from kvplan.engines.vllm_memory import weights_per_rank

    spec = load_model("deepseek-v3")
    gpu = load_profile("h200")
    mib = gpu.usable_memory_bytes / 2**20
    plain = default_mem_fraction(spec, gpu, 8, 1)
    dp = default_mem_fraction(spec, gpu, 8, 1, dp_attention=8)
    assert (plain.chunked_prefill_size, plain.cuda_graph_max_bs) == (8192, 512)
    assert (dp.chunked_prefill_size, dp.cuda_graph_max_bs) == (8192, 512)
    assert plain.reserved_bytes == 16_384 * 2**20
    assert dp.reserved_bytes == (16_384 + 18_432) * 2**20
    assert dp.mem_fraction_static == round((mib - 34_816) / mib, 3)
    whole = weights_per_rank(spec, spec, True, True, "fp8", 1, None, 8)
    split = weights_per_rank(spec, spec, True, True, "fp8", 1, None, 8, mlp_ranks=8)
    mlp = (spec.param_parts["mlp"] + spec.param_parts["shared_experts"]) * 7 / 8
    head = 129_280 * HIDDEN * 2 * 7 / 8  # bf16, the vocabulary already a multiple of 64
    assert whole.total_bytes - split.total_bytes == pytest.approx(mlp + head, rel=1e-3)
    assert whole.lm_head_bytes - split.lm_head_bytes == pytest.approx(head, rel=1e-9)


def test_the_input_embedding_is_whole_on_every_gpu_under_dp_attention():
    """SGLang builds the input embedding with VocabParallelEmbedding(enable_tp=not
    is_dp_attention_enabled()) (models/deepseek_v2.py, qwen2.py, llama4.py): under DP attention
    every GPU holds all of it, whatever the attention TP. DeepSeek-V3 at --tp 8 --dp-size 4
    (attention TP 2): a GPU holds 129,280 x 7,168 bf16 embedding bytes, 1,853,358,080, where a
    split over the attention TP would hold half. The allocation's weights carry the difference
    (sglang_allocation through weights_per_rank's `embedding_ranks`)."""
    from kvplan.engines.request import EngineRequest
    from kvplan.engines.sglang import sglang_allocation
    from kvplan.engines.vllm_memory import weights_per_rank

    spec = load_model("deepseek-v3")
    whole_bytes = 129_280 * HIDDEN * 2
    assert whole_bytes == 1_853_358_080
    split = weights_per_rank(spec, spec, True, True, "fp8", 2, None, 8, mlp_ranks=8)
    whole = weights_per_rank(
        spec, spec, True, True, "fp8", 2, None, 8, mlp_ranks=8, embedding_ranks=1
    )
    assert split.embedding_bytes == pytest.approx(whole_bytes / 2, rel=1e-9)
    assert whole.embedding_bytes == pytest.approx(whole_bytes, rel=1e-9)
    assert whole.total_bytes - split.total_bytes == pytest.approx(whole_bytes / 2, rel=1e-9)
    request = EngineRequest(engine="sglang", tp=2, dp_attention=4, expert_ranks=8)
    alloc = sglang_allocation(spec, load_profile("h200"), request)
    assert alloc.weights_bytes == pytest.approx(whole.total_bytes, rel=1e-9)


def test_the_layout_note_puts_sglangs_mlps_on_the_group():
    """The sim-expert-parallel note says what each engine's DP ranks replicate: vLLM's the
    attention and the dense layers at the attention TP; SGLang's the attention alone, its MLPs,
    router and head over the whole group (1/G of their weights a GPU)."""
    from kvplan.notes import note
    from kvplan.present.notes import note_text

    def words(engine: str, speculative: bool = False) -> str:
        return note_text(
            note(
                "sim-expert-parallel",
                layout="DP 8 x TP 1",
                dp=8,
                ep=8,
                experts_per_rank=32,
                gpus=8,
                router="round_robin",
                engine=engine,
                speculative=speculative,
            )
        )

    assert "and the dense layers likewise" in words("vllm")
    sglang_words = words("sglang")
    assert "dense layers likewise" not in sglang_words
    assert "run over the whole group on the gathered rows (1/G of their weights" in sglang_words
    idle = "while any rank prefills, every other rank runs an idle batch"
    assert idle not in sglang_words and idle not in words("vllm", True)
    assert idle in words("sglang", True)


class _SpeculativeSglang(SglangEngine):
    """SGLang's scheduler as it runs with speculative decoding (SglangEngine's rule reads the
    step model's `speculation`; these ranks price the target's steps alone)."""

    lockstep_exclusive_prefill = True


def test_only_speculative_sglang_keeps_decodes_out_of_a_prefill_step(sglang):
    """scheduler.get_next_batch_to_run syncs the ranks' new prefill batches first when
    speculative decoding and DP attention are both on ("prefill and decode batches will not be
    mixed"): the rule holds for an SGLang step model with `speculation`, not without."""
    from types import SimpleNamespace

    engine = SglangEngine(EngineConfig(8, 256, 4096, 1024, 64), sglang, 0.0)
    assert not engine.lockstep_exclusive_prefill
    engine.model = SimpleNamespace(speculation=object())  # type: ignore[assignment]
    assert engine.lockstep_exclusive_prefill


@pytest.mark.parametrize("exclusive", [False, True])
def test_a_prefill_on_one_rank_idles_the_others_decodes_under_speculation(sglang, exclusive):
    """Eight DP ranks by round robin: rank 0 serves a 100-token prompt, rank 1 a 1,000-token
    one in chunks of 256 (256, 256, 256, 232), 4 outputs each, six ranks idle. Step 0 both
    prefill. In steps 1-3 rank 1 prefills its next chunks; without speculation rank 0 decodes
    in them (its 4 tokens end with step 3), with it rank 0 runs an idle batch and its 2nd-4th
    tokens wait for steps 4-6, when both decode. A step with rank 0 idle is priced as rank 1's
    chunk alone, eagerly, its MoE over its 256 tokens (SUM_LEN, the idle ranks adding none)."""
    from kvplan.formulas.batch_step import lockstep_step
    from kvplan.simulate import cluster
    from kvplan.simulate.frontend import Frontend
    from kvplan.simulate.workload import RequestSpec

    cls = _SpeculativeSglang if exclusive else SglangEngine
    ranks = [cls(EngineConfig(8, 256, 4096, 1024, 64), sglang, 0.0) for _ in range(8)]
    requests = [RequestSpec(0, 0.0, 100, 4), RequestSpec(1, 0.0, 1000, 4)]
    run = cluster.run(requests, ranks, lockstep=8, frontend=Frontend(0.0, 0.0))
    long_rank = ranks[1].log
    assert long_rank.emitted == [0, 0, 0, 1, 1, 1, 1]
    assert ranks[0].log.emitted == [1, 1, 1, 1]
    steps = [0, 4, 5, 6] if exclusive else [0, 1, 2, 3]
    assert ranks[0].log.end_s == [long_rank.end_s[k] for k in steps]
    assert all(not r.log.emitted for r in ranks[2:])
    finished = sorted((r.rid, r.replica, r.first_step, r.last_step) for r in run.finished)
    assert finished == [(0, 0, 0, 3), (1, 1, 3, 6)]
    if exclusive:  # steps 1-3: rank 1's chunk alone, seven ranks idle
        eager = sglang.without_graphs()
        for k, chunk in ((1, (256, 256)), (2, (256, 512)), (3, (232, 768))):
            shape = BatchShape(0, 0, (chunk,), 1 if k == 3 else 0)
            step, _ = lockstep_step(eager, [shape], 7, False, chunk[0], shape.num_sampled)
            took = long_rank.end_s[k] - long_rank.end_s[k - 1]
            assert took == pytest.approx(step.total_s, rel=1e-9)


def test_a_speculative_dp_attention_run_says_its_ranks_idle_during_prefills():
    """simulate wires the rule and its words: SGLang DeepSeek-V3 (its MTP layer as the EAGLE
    draft) at --dp-size 8 --enable-dp-attention: the layout note names the idle ranks."""
    from helpers import run_json

    doc = run_json(
        "simulate", "deepseek-v3", "--gpu", "h200", "--engine", "sglang", "--tp", "8",
        "--dp-size", "8", "--enable-dp-attention", "--speculative-algorithm", "EAGLE",
        "--speculative-num-steps", "1", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "2", "--num-prompts", "16", "--input-len", "200",
        "--output-len", "20",
    )  # fmt: skip
    layout = next(n["text"] for n in doc["notes"] if n["id"] == "sim-expert-parallel")
    assert "while any rank prefills, every other rank runs an idle batch" in layout
