"""Recurrent mixers, read from structure: which state a layer keeps (Mamba-1, Mamba-2, Gated
DeltaNet, lightning linear attention) and its parameters. Detection goes by the fields a config
declares, whatever its model_type; each reader names the fields it used."""

from kvplan.anatomy.model import State, StateKind
from kvplan.dtypes import model_dtype_name
from kvplan.errors import KvplanError
from kvplan.inputs.fields import Fields

# Fields whose presence says a config has a recurrent state, by reader.
DELTANET_FIELDS = ("linear_num_value_heads", "linear_num_key_heads")
NEMOTRON_MAMBA_FIELDS = ("mamba_num_heads", "mamba_head_dim")
FALCON_MAMBA_FIELDS = ("mamba_n_heads", "mamba_d_head", "mamba_d_ssm")
ZAMBA_MAMBA_FIELDS = ("n_mamba_heads", "mamba_headdim", "mamba_ngroups")
JAMBA_MAMBA_FIELDS = ("mamba_d_state", "mamba_expand", "mamba_d_conv")


SSM_DTYPE_FIELDS = ("mamba_ssm_cache_dtype", "mamba_ssm_dtype")


def ssm_dtype_field(f: Fields) -> str:
    """The config field naming the SSM state's dtype (mamba_ssm_cache_dtype, Nemotron-H's;
    mamba_ssm_dtype, Qwen3.5's), "" if none does. Which field an engine honours, and its
    default without one, is the engine's (engines.vllm.state_dtypes)."""
    return next((k for k in SSM_DTYPE_FIELDS if f.string(k)), "")


def state_dtype(f: Fields, dtype: str) -> str:
    """The SSM state's dtype the config names (ssm_dtype_field), else the model dtype."""
    field = ssm_dtype_field(f)
    return model_dtype_name(f.string(field)) if field else dtype


def _mamba2(
    f, intermediate, heads, head_dim, state, groups, kernel, dtype, used
) -> tuple[State, str]:
    if heads * head_dim != intermediate:
        raise KvplanError(
            f"{f.source}: Mamba-2 heads x head_dim = {heads * head_dim} != intermediate "
            f"{intermediate}"
        )
    if heads % groups:
        raise KvplanError(f"{f.source}: {heads} Mamba heads cannot be split over {groups} groups")
    return State(
        StateKind.MAMBA2,
        kernel,
        intermediate=intermediate,
        state_size=state,
        num_heads=heads,
        head_dim=head_dim,
        num_groups=groups,
        conv_dtype=dtype,
        ssm_dtype=state_dtype(f, dtype),
        ssm_dtype_field=ssm_dtype_field(f),
    ), used


def read_state(f: Fields, model_type: str, hidden: int, dtype: str) -> tuple[State, str] | None:
    """The recurrent state a config declares, with the fields that decided it; None if none."""
    if f.has("conv_L_cache"):  # LFM2: a gated short convolution over the hidden size
        state = State(
            StateKind.SHORT_CONV,
            f.int("conv_L_cache", why="the convolution state"),
            intermediate=hidden,
            conv_dtype=dtype,
            ssm_dtype=dtype,
        )
        return state, "short convolution from conv_L_cache over hidden_size"
    if any(f.has(k) for k in DELTANET_FIELDS):
        value_heads = f.int("linear_num_value_heads", why="the Gated DeltaNet state")
        value_dim = f.int("linear_value_head_dim", why="the Gated DeltaNet state")
        state = State(
            StateKind.GATED_DELTANET,
            f.int("linear_conv_kernel_dim", default=4),
            num_heads=value_heads,
            head_dim=value_dim,
            key_heads=f.int("linear_num_key_heads", why="the Gated DeltaNet state"),
            key_dim=f.int("linear_key_head_dim", why="the Gated DeltaNet state"),
            conv_dtype=dtype,
            ssm_dtype=state_dtype(f, dtype),
            ssm_dtype_field=ssm_dtype_field(f),
        )
        return state, "Gated DeltaNet from linear_num_key_heads/linear_num_value_heads/head dims"
    if any(f.has(k) for k in NEMOTRON_MAMBA_FIELDS):
        heads = f.int("mamba_num_heads", why="the Mamba-2 state")
        head_dim = f.int("mamba_head_dim", why="the Mamba-2 state")
        return _mamba2(
            f,
            heads * head_dim,
            heads,
            head_dim,
            f.int("ssm_state_size", why="the Mamba-2 state"),
            f.int("n_groups", default=8),
            f.int("conv_kernel", default=4),
            dtype,
            "Mamba-2 from mamba_num_heads/mamba_head_dim/ssm_state_size/n_groups",
        )
    if any(f.has(k) for k in FALCON_MAMBA_FIELDS):
        heads = f.int("mamba_n_heads", why="the Mamba-2 state")
        head_dim = f.int("mamba_d_head", why="the Mamba-2 state")
        d_ssm = f.opt_int("mamba_d_ssm")
        intermediate = d_ssm or heads * head_dim
        return _mamba2(
            f,
            intermediate,
            heads,
            head_dim,
            f.int("mamba_d_state", why="the Mamba-2 state"),
            f.int("mamba_n_groups", default=1),
            f.int("mamba_d_conv", default=4),
            dtype,
            "Mamba-2 from mamba_n_heads/mamba_d_head/mamba_d_state/mamba_n_groups",
        )
    if any(f.has(k) for k in ZAMBA_MAMBA_FIELDS):
        expand = f.int("mamba_expand", default=2)
        heads = f.int("n_mamba_heads", default=8)  # zamba2's class default
        intermediate = expand * hidden
        if intermediate % heads:
            raise KvplanError(
                f"{f.source}: mamba_expand x hidden is not a multiple of n_mamba_heads"
            )
        return _mamba2(
            f,
            intermediate,
            heads,
            intermediate // heads,  # transformers recomputes mamba_headdim this way
            f.int("mamba_d_state", default=64),
            f.int("mamba_ngroups", default=1),
            f.int("mamba_d_conv", default=4),
            dtype,
            "Mamba-2 from mamba_expand/n_mamba_heads/mamba_d_state/mamba_ngroups",
        )
    if model_type == "mamba2" or (f.has("state_size") and f.has("num_heads") and f.has("expand")):
        heads = f.int("num_heads", why="the Mamba-2 state")
        head_dim = f.int("head_dim", default=64)
        return _mamba2(
            f,
            f.int("expand", default=2) * hidden,
            heads,
            head_dim,
            f.int("state_size", default=128),
            f.int("n_groups", default=1),
            f.int("conv_kernel", default=4),
            dtype,
            "Mamba-2 from num_heads/head_dim/state_size/n_groups/expand",
        )
    if any(f.has(k) for k in JAMBA_MAMBA_FIELDS):
        state = State(
            StateKind.MAMBA1,
            f.int("mamba_d_conv", default=4),
            intermediate=f.int("mamba_expand", default=2) * hidden,
            state_size=f.int("mamba_d_state", default=16),
            conv_dtype=dtype,
            ssm_dtype=state_dtype(f, dtype),
            ssm_dtype_field=ssm_dtype_field(f),
        )
        return state, "Mamba-1 from mamba_expand/mamba_d_state/mamba_d_conv"
    if model_type == "mamba" or (f.has("state_size") and f.has("conv_kernel")):
        state = State(
            StateKind.MAMBA1,
            f.int("conv_kernel", default=4),
            intermediate=f.int("intermediate_size", default=2 * hidden),
            state_size=f.int("state_size", default=16),
            conv_dtype=dtype,
            ssm_dtype=state_dtype(f, dtype),
            ssm_dtype_field=ssm_dtype_field(f),
        )
        return state, "Mamba-1 from intermediate_size/state_size/conv_kernel"
    return None


def lightning_state(f: Fields, heads: int, head_dim: int, dtype: str) -> State:
    """MiniMax-style linear ("lightning") attention: a heads x head_dim x head_dim state."""
    return State(
        StateKind.LIGHTNING,
        1,
        num_heads=heads,
        head_dim=head_dim,
        key_dim=head_dim,
        conv_dtype=dtype,
        ssm_dtype=state_dtype(f, dtype),
        ssm_dtype_field=ssm_dtype_field(f),
    )


def mixer_params(
    f: Fields, state: State, hidden: int, norm_default: bool = True, inner_norms: bool = True
) -> int:
    """Parameters of one recurrent mixer (in/out projections, conv, dt/A/D, norm)."""
    if state.kind is StateKind.MAMBA2:
        groups_width = 2 * state.num_groups * state.state_size
        conv_dim = state.intermediate + groups_width
        in_proj = hidden * (2 * state.intermediate + groups_width + state.num_heads)
        conv = conv_dim * state.conv_kernel + (conv_dim if f.bool("use_conv_bias", True) else 0)
        if f.bool("mamba_conv_bias", True) is False:
            conv = conv_dim * state.conv_kernel
        norm = state.intermediate if f.bool("mamba_rms_norm", norm_default) else 0
        proj_bias = f.bool("mamba_proj_bias", False) or f.bool("use_bias", False)
        bias = (
            (2 * state.intermediate + groups_width + state.num_heads + hidden) if proj_bias else 0
        )
        return in_proj + conv + 3 * state.num_heads + norm + state.intermediate * hidden + bias
    if state.kind is StateKind.GATED_DELTANET:
        key_width = state.key_heads * state.key_dim
        value_width = state.num_heads * state.head_dim
        conv_dim = 2 * key_width + value_width
        return (
            hidden * (2 * key_width + 2 * value_width)  # in_proj q, k, v and the z gate
            + hidden * 2 * state.num_heads  # in_proj b and a
            + conv_dim * state.conv_kernel  # depthwise conv, no bias
            + 2 * state.num_heads  # dt_bias, A_log
            + state.head_dim  # gated RMSNorm
            + value_width * hidden  # out_proj
        )
    if state.kind is StateKind.SHORT_CONV:
        # in_proj to (B, C, x), a depthwise conv, out_proj; conv_bias puts a bias on all three
        width, bias = state.intermediate, f.bool("conv_bias", False)
        return (
            hidden * 3 * width
            + width * state.conv_kernel
            + width * hidden
            + ((3 * width + width + hidden) if bias else 0)
        )
    if state.kind is StateKind.MAMBA1:
        inner, d_state, d_conv = state.intermediate, state.state_size, state.conv_kernel
        dt = f.raw("mamba_dt_rank", "time_step_rank")
        dt_rank = dt if isinstance(dt, int) and not isinstance(dt, bool) else -(-hidden // 16)
        return (
            hidden * 2 * inner  # in_proj
            + inner * d_conv  # conv weight
            + inner  # conv bias
            + inner * (dt_rank + 2 * d_state)  # x_proj
            + dt_rank * inner  # dt_proj weight
            + inner  # dt_proj bias
            + inner * d_state  # A_log
            + inner  # D
            + inner * hidden  # out_proj
            + (dt_rank + 2 * d_state if f.bool("mamba_inner_layernorms", inner_norms) else 0)
        )
    raise KvplanError(
        f"{f.source}: kvplan cannot count the parameters of a {state.kind.value} mixer"
    )
