"""The engines' MoE kernel switches and the expert splits they refuse.

vLLM's --moe-backend (config/kernel.py KernelConfig.moe_backend, a Literal, so argparse takes
its names exactly as spelled) and SGLang's --moe-runner-backend (server_args.py
MOE_RUNNER_BACKEND_CHOICES): the names each release takes, and the launches the engine refuses
for the weights format, the GPU or the layout. Whatever backend is named, kvplan times the MoE
layers on its default kernel tables (note sim-moe-kernels).

A block-quantized FP8 checkpoint's experts split over the ranks that share an expert (TP without
EP) must keep whole 128-wide blocks: both engines stop at weight creation otherwise
(check_expert_split)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvplan.engines.backends import flag_of, moe_field
from kvplan.engines.releases import VLLM_VERSION
from kvplan.errors import KvplanError

if TYPE_CHECKING:
    from kvplan.engines.sglang import SglangRules

# vLLM config/kernel.py MoEBackend: as vllm#33807 added --moe-backend (early 2026; the same
# literal in 0.17, 0.18 and 0.19, whose fused_moe oracles kvplan reads from 0.19 on), then with
# deep_gemm_mega_moe and emulation (the literal of the 0.20/0.21 line and of the newest
# kernel.py read, kvplan's 0.32)
_VLLM_019 = (
    "auto",
    "triton",
    "deep_gemm",
    "cutlass",
    "flashinfer_trtllm",
    "flashinfer_cutlass",
    "flashinfer_cutedsl",
    "marlin",
    "aiter",
)
VLLM_MOE_BACKENDS = {
    "0.19": _VLLM_019,
    "0.21": (*_VLLM_019[:4], "deep_gemm_mega_moe", *_VLLM_019[4:], "emulation"),
}
VLLM_MOE_BACKENDS["0.32"] = VLLM_MOE_BACKENDS["0.21"]
# fused_moe/oracle: what each weights class maps a user's backend to (map_unquantized_backend,
# map_fp8_backend); another name raises "moe_backend='X' is not supported for ... MoE"
VLLM_UNQUANTIZED_MOE = ("triton", "flashinfer_trtllm", "flashinfer_cutlass", "aiter")
VLLM_FP8_MOE = (
    "triton",
    "deep_gemm",
    "cutlass",
    "flashinfer_trtllm",
    "flashinfer_cutlass",
    "marlin",
    "aiter",
)
UNQUANTIZED = ("bf16", "fp16", "fp32")
FP8 = ("fp8", "fp8-tensor")

# SGLang 0.5 (server_args.py of the 0.5.9 line, the lists kvplan's attention backends come from);
# 0.4 had no such flag (--enable-ep-moe, --enable-deepep-moe, --enable-flashinfer-*-moe instead)
SGLANG_MOE_RUNNER_BACKENDS = (
    "auto",
    "deep_gemm",
    "triton",
    "triton_kernel",
    "flashinfer_trtllm",
    "flashinfer_cutlass",
    "flashinfer_mxfp4",
    "flashinfer_cutedsl",
    "cutlass",
)
# _handle_moe_kernel_config: the --quantization values each FlashInfer runner takes (None: none)
SGLANG_CUTLASS_QUANT = ("modelopt_fp4", "modelopt_fp8", None)
SGLANG_TRTLLM_QUANT = ("modelopt_fp4", "fp8", "modelopt_fp8", "compressed-tensors", None)

FP8_BLOCK_N = 128  # weight_block_size [128, 128]: DeepSeek-V3/R1, Qwen3, MiniMax-M2 FP8


def _choices(names: tuple[str, ...]) -> str:
    return ", ".join(repr(n) for n in names)


def moe_backend_name(engine: str, value: str | None, version: str) -> str | None:
    """The backend as the engine's argument parser takes it (None: not given), refused with its
    own words where it refuses the name. `version`: vLLM's allocator release (VLLM_VERSIONS) or
    SGLang's ("0.4", "0.5")."""
    if value is None:
        return None
    flag = flag_of(moe_field(engine))
    name = str(value)
    if engine == "sglang":  # 0.4 has no such flag (engines.backends.check_backends)
        names: tuple[str, ...] = SGLANG_MOE_RUNNER_BACKENDS
    else:
        names = VLLM_MOE_BACKENDS[version]
    if name not in names:
        raise KvplanError(
            f"argument {flag}: invalid choice: {name[:40]!r} (choose from {_choices(names)})"
        )
    return name


def check_vllm_moe_backend(
    name: str | None, spec, gpu, wdtype: str, generation: int, version: str = VLLM_VERSION
) -> None:
    """vLLM's refusals of a --moe-backend at start-up: a backend its oracle does not map for
    the experts' format (fused_moe/oracle: unquantized, FP8), or whose kernels the device does not
    run ('does not support the deployment configuration')."""
    if name is None or name == "auto" or spec.moe is None:
        return
    if wdtype == "checkpoint":  # the tensor headers read: the format the config states
        wdtype = spec.weights_quantization or spec.dtype
    if wdtype in UNQUANTIZED and name not in VLLM_UNQUANTIZED_MOE:
        raise KvplanError(
            f"moe_backend={name!r} is not supported for unquantized MoE. Expected one of "
            f"{list(VLLM_UNQUANTIZED_MOE)} (vLLM {version}, {spec.name}'s experts are {wdtype})"
        )
    if wdtype in FP8 and name not in VLLM_FP8_MOE:
        raise KvplanError(
            f"moe_backend={name!r} is not supported for FP8 MoE. Expected one of "
            f"{list(VLLM_FP8_MOE)} (vLLM {version})"
        )
    amd = gpu.device_vendor.upper() == "AMD"
    why = None
    if name == "aiter" and not amd:
        why = "AITER's kernels run on ROCm only"
    elif amd and name.startswith(("flashinfer", "deep_gemm", "cutlass")):
        why = f"{name}'s kernels are CUDA's"
    elif name == "flashinfer_trtllm" and generation != 10:
        why = "FlashInfer's TRT-LLM MoE kernels run on datacenter Blackwell (SM100) only"
    elif name in ("deep_gemm", "deep_gemm_mega_moe") and generation not in (9, 10):
        why = "DeepGEMM runs on Hopper (SM90) and Blackwell (SM100) only"
    elif name == "deep_gemm" and wdtype in FP8 and wdtype != "fp8":
        why = "DeepGEMM takes block-quantized FP8 only"
    if why:
        raise KvplanError(
            f"vLLM refuses --moe-backend {name} on {gpu.name}: the MoE backend does not support "
            f"the deployment configuration ({why})"
        )


def check_sglang_moe_backend(
    name: str | None, quantization: str | None, tp: int, ep_size: int | None
) -> None:
    """SGLang's ServerArgs._handle_moe_kernel_config asserts (0.5.9-line server_args.py), on
    --quantization as typed (None: not given) and the EP size."""
    if name is None:
        return
    quant = None if quantization is None else str(quantization).strip().lower()
    ep = ep_size or 1
    if name == "flashinfer_cutlass":
        if quant not in SGLANG_CUTLASS_QUANT:
            raise KvplanError(
                f"SGLang refuses --moe-runner-backend flashinfer_cutlass: Invalid quantization "
                f"{quant[:40]!r}. FlashInfer Cutlass MOE supports only: 'modelopt_fp4', "
                "'modelopt_fp8', or bfloat16 (None)."
            )
        if ep not in (1, tp):
            raise KvplanError(
                "SGLang refuses --moe-runner-backend flashinfer_cutlass: The expert parallel "
                f"size must be 1 or the same as the tensor parallel size (--ep-size {ep}, "
                f"--tp {tp})"
            )
    if name == "flashinfer_trtllm" and quant not in SGLANG_TRTLLM_QUANT:
        raise KvplanError(
            f"SGLang refuses --moe-runner-backend flashinfer_trtllm: Invalid quantization "
            f"{quant!r}. FlashInfer TRTLLM MOE supports only: 'modelopt_fp4', 'fp8', "
            "'modelopt_fp8', 'compressed-tensors', or bfloat16 (None)."
        )
    if name == "cutlass" and quant in ("fp8", "mxfp8") and ep != 1:
        raise KvplanError(
            "SGLang refuses --moe-runner-backend cutlass: FP8/MXFP8 Cutlass MoE is only "
            f"supported with ep_size == 1 (--ep-size {ep})"
        )


def check_expert_split(spec, weights_given: bool, moe_tp: int) -> None:
    """Block-FP8 experts split `moe_tp` ways (the ranks sharing each expert: TP without EP,
    vLLM's TP x DP, SGLang's TP / EP): each rank's share of the intermediate width must be whole
    128-wide blocks, else vLLM and SGLang stop in Fp8MoEMethod.create_weights. With EP each rank
    keeps whole experts (moe_tp 1). `weights_given`: the checkpoint's format is overridden
    (--quantization, --weights-dtype), so its blocks do not apply."""
    moe = spec.moe
    if moe is None or weights_given or spec.weights_quantization != "fp8" or moe_tp <= 1:
        return
    parts = spec.quantized_parts
    if parts is not None and "experts" not in parts:
        return
    width = moe.expert_intermediate_size // moe_tp
    if moe.expert_intermediate_size and width % FP8_BLOCK_N:
        raise KvplanError(
            f"The output_size of gate's and up's weight = {width} is not divisible by weight "
            f"quantization block_n = {FP8_BLOCK_N}: {spec.name}'s experts "
            f"({moe.expert_intermediate_size} wide, FP8 blocks of {FP8_BLOCK_N}) split "
            f"{moe_tp} ways; the engines stop at weight loading (expert parallelism keeps "
            "them whole)"
        )


# --- the fused-MoE runner SGLang resolves (sglang_moe_runner) --------------------------------
# server_args.py ServerArgs._handle_model_specific_adjustments (read in the 0.5.8/0.5.9-line
# source, the one with KimiK25ForConditionalGeneration), with no --moe-runner-backend (auto) and
# no --moe-a2a-backend (kvplan does not simulate DeepEP/Mooncake all-to-all, under which auto
# resolves deep_gemm), on SM100 (is_sm100_supported: compute capability 10.x; SM120 is not):
# (config model_types, weights formats, runner, first 0.5 patch with the rule). A model_type is
# the config's (the checkpoint's own where it differs: kimi_k2 configs name DeepseekV3ForCausalLM,
# kimi_k25 KimiK25ForConditionalGeneration: both the DeepSeek branch).
# - DeepseekV3ForCausalLM, KimiK25ForConditionalGeneration: quantization fp8, modelopt_fp8,
#   modelopt_fp4 -> flashinfer_trtllm. FP4 was the DeepSeek default before 0.5.3 (PR #11816:
#   "the fp4 path is already using this"); block FP8 from PR #11816 (opened 2025-10-19, "If on
#   SM100 + FP8 for dpsk, use flashinfer_trtllm as default moe runner backend, replacing
#   triton"): 0.5.4 is the first release after it (the merge date is not checked: ambiguous
#   between 0.5.4 and 0.5.5, 0.5.4 taken).
# - Kimi-K2/K2.5 thinking int4 (compressed-tensors W4A16, `is_kimi_k2_k25_thinking_int4`) ->
#   flashinfer_trtllm: absent from the 0.5.9-line source, present in the newest read;
#   aiconfigurator's collector times int4_wo under flashinfer_trtllm from its 0.5.14 tables
#   (marlin at 0.5.9 and 0.5.10). kvplan takes 0.5.14 as the first (0.5.10-0.5.13 not read).
# - Qwen3MoeForCausalLM, Qwen3VLMoeForConditionalGeneration, Qwen3NextForCausalLM: fp8 and
#   modelopt_fp4 -> flashinfer_trtllm from PR #13489 (2025-11-18, "on SM100 and no A2A, auto
#   backend becomes flashinfer_trtllm"; 0.5.6 the first release after it); bf16 (quantization
#   None) too in the 0.5.8/0.5.9-line source (`or self.quantization is None`), not in
#   #13489's diff: 0.5.7 is not read, 0.5.8 taken as the first.
# - Glm4MoeForCausalLM: modelopt_fp4 -> flashinfer_trtllm where flashinfer-python >= 0.6.2
#   (the 0.5.8/0.5.9 line; 0.5.8 taken as the first, ambiguous as above).
# - Llama4: fp8, modelopt_fp8 -> flashinfer_trtllm (every 0.5 release read).
# - GptOssForCausalLM: MXFP4 on Blackwell (is_blackwell_supported) -> flashinfer_mxfp4; else,
#   at EP 1 with triton_kernels installed, triton_kernel.
SGLANG_SM100_TRTLLM_RULES = (
    (("deepseek_v3", "kimi_k2", "kimi_k25"), ("nvfp4",), 0),
    (("deepseek_v3", "kimi_k2", "kimi_k25"), ("fp8",), 4),
    (("kimi_k2", "kimi_k25"), ("int4",), 14),
    (("qwen3_moe", "qwen3_vl_moe", "qwen3_next"), ("fp8", "nvfp4"), 6),
    (("qwen3_moe", "qwen3_vl_moe", "qwen3_next"), ("bf16",), 8),
    (("glm4_moe",), ("nvfp4",), 8),
    (("llama4", "llama4_text"), ("fp8",), 0),
)
GPT_OSS_MODEL_TYPE = "gpt_oss"  # GptOssForCausalLM (engines.sglang reads it too)
# the runner `auto` leaves to the weights' MoE method (fused_moe_triton/layer.py, the
# quantization methods of 0.5.9): Triton's fused MoE for 16-bit and FP8 experts, Marlin's WNA16
# kernel for int4 compressed-tensors experts (CompressedTensorsWNA16MoEMethod), SGLang's own
# CUTLASS FP4 MoE for ModelOpt NVFP4 experts without a FlashInfer runner
# (ModelOptNvFp4FusedMoEMethod -> cutlass_moe_fp4)
SGLANG_AUTO_RUNNERS = {"bf16": "triton", "fp8": "triton", "int4": "marlin", "nvfp4": "cutlass"}
# aiconfigurator's kernel_source of a fused-MoE row (the moe/ files' `runners`) -> the runner
# SGLang names (MoeRunnerBackend): collector/sglang/collect_moe.py's labels
SGLANG_RUNNER_OF_SOURCE = {
    "sglang_fused_moe_triton": "triton",
    "sglang_fused_moe_triton_situ_as_silu": "triton",
    "sglang_flashinfer_trtllm_moe": "flashinfer_trtllm",
    "sglang_flashinfer_cutlass_moe": "flashinfer_cutlass",
    "sglang_flashinfer_cutedsl_moe": "flashinfer_cutedsl",
    "sglang_flashinfer_mxfp4_moe": "flashinfer_mxfp4",
    "sglang_mxfp4_flashinfer_trtllm_moe": "flashinfer_mxfp4",
    "sglang_marlin_moe": "marlin",
    "sglang_marlin_moe_situ_as_silu": "marlin",
}


def sglang_weights_format(wdtype: str) -> str:
    """A kvplan weights format as the runner rules read it: "bf16" (no --quantization: fp16,
    bf16, fp32), "fp8", "nvfp4", "mxfp4", "int4" (any int4 grouping), else the format itself."""
    w = str(wdtype).lower()
    if w in UNQUANTIZED:
        return "bf16"
    if w in FP8:
        return "fp8"
    if w.startswith("int4"):
        return "int4"
    return w


def sglang_moe_runner(
    rules: SglangRules,
    model_type: str,
    wdtype: str,
    generation: int,
    given: str | None = None,
    ep_size: int = 1,
) -> str:
    """The fused-MoE runner SGLang runs a model's routed experts on (MoeRunnerBackend's name):
    `given` (--moe-runner-backend) where named and not auto; else
    _handle_model_specific_adjustments' pick on SM100 (SGLANG_SM100_TRTLLM_RULES, gpt-oss's
    rules), else what auto leaves to the weights' MoE method (SGLANG_AUTO_RUNNERS). `rules`: the
    release's (engines.sglang.sglang_rules; the SM100 rules are 0.5's, keyed by its patches,
    gated by SglangRules.from_05: a 0.4 release precedes every one of them); `model_type` the
    config's (the checkpoint's top-level one); `generation` the GPU's compute-capability major
    (engines.vllm.gpu_generation); `ep_size` SGLang's --ep-size."""
    if given is not None and given != "auto":
        return given
    fmt = sglang_weights_format(wdtype)
    if model_type == GPT_OSS_MODEL_TYPE and fmt == "mxfp4":
        if generation >= 10:  # is_blackwell_supported: SM100 and SM120 alike
            return "flashinfer_mxfp4"
        return "triton_kernel" if ep_size == 1 else "triton"
    if generation == 10:
        for model_types, formats, first in SGLANG_SM100_TRTLLM_RULES:
            if model_type in model_types and fmt in formats and rules.from_05(first):
                return "flashinfer_trtllm"
    return SGLANG_AUTO_RUNNERS.get(fmt, "triton")
