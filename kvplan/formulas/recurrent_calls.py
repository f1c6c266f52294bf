"""Recurrent (linear-attention) layers timed from the GPU's kernel tables.

A Gated DeltaNet layer (Qwen3-Next, Qwen3.5) runs, per step, as the engines' GDN backends call
it (SGLang's layers/attention/hybrid_linear_attn_backend.py; vLLM's models/qwen3_next.py, its
v1/attention/backends/gdn_attn.py splitting a step's decodes from its prefills): for the step's
decodes the conv-state update then the fused recurrent state update (gating fused in), one call
each over every decode; for its prefill chunks the causal conv over their tokens then the
chunked delta rule, one varlen call each over every chunk (the prefill's separate gating kernel
is in no table; the small-launch floor counts CUDA-graph decode launches only, so in a prefill
step it is inside the per-layer launch constant alone). aiconfigurator-core 0.12.0 timed those
kernels per GPU and engine
(linear_attention/<engine>/<version>/gdn_perf.parquet), by the heads on a rank; kvplan keeps one
layer's summed time per phase in kernel_tables/recurrent/ (scripts/derive_achieved.py
recurrent_grid) and reads it here.

Interpolation rule (`decode_us`, `prefill_us`): a decode step of n sequences is read piecewise
linearly in n between the table's batches (1-1,024), and past the largest each further sequence
adds what one did between the two largest (the sequences are independent), a speculative
verification's k + 1 tokens a decode read as that many one-token decodes (the Gated DeltaNet
tables time no verify kernel); a prefill of c chunks
holding N new tokens is read as c sequences of N / c tokens, piecewise linearly along the tokens
then along the sequences, past the table's last timed point of a row (the table stops at 2M
tokens a call) each further token (then sequence) adding what one did between the last two. Only
the heads a rank holds that the table timed are read (key heads x key dim, value heads x value
dim): a layer of another head shape, or of a kind no table holds (Mamba-2: aiconfigurator's
TRT-LLM table times only its conv kernels, not the SSD scan; KDA; lightning), is left to the
roofline (StepModel.untimed_parts).
"""

from __future__ import annotations

from bisect import bisect_left

from kvplan.anatomy.model import ModelSpec, StateKind
from kvplan.inputs.kernel_tables import RecurrentGrid
from kvplan.record import NamedTuple


def recurrent_shape_key(kind: StateKind, key_heads: int, key_dim: int, heads: int, dim: int) -> str:
    """A recurrent/ file's key of one layer's heads on a rank: "gated_deltanet/2x128/4x128"."""
    return f"{kind.value}/{key_heads}x{key_dim}/{heads}x{dim}"


def _along(axis: tuple, values, x: float) -> float | None:
    """values (aligned with axis, None where not timed) at x: piecewise linear between timed
    points, past the last timed point each further unit adding what one did between the last
    two (in proportion where one point was), flat below the first; None where none was."""
    pts = [(a, v) for a, v in zip(axis, values, strict=True) if v is not None]
    if not pts:
        return None
    if x <= pts[0][0]:
        return float(pts[0][1])
    if len(pts) == 1:  # one timed point below x: in proportion
        return pts[0][1] * x / pts[0][0]
    i = min(bisect_left([a for a, _ in pts], x), len(pts) - 1)
    (x0, y0), (x1, y1) = pts[i - 1], pts[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


class RecurrentKernels(NamedTuple):
    """One model's recurrent layers as one GPU and engine's tables time them: `layers` layers of
    the head shape `key`, their decode row by batch and prefill grid by batch and tokens."""

    layers: int
    key: str
    decode: tuple
    prefill: tuple
    grid: RecurrentGrid

    @classmethod
    def of(cls, spec: ModelSpec, tp: int, grid: RecurrentGrid | None) -> RecurrentKernels | None:
        """The timing of every recurrent layer of `spec` at TP `tp` (None: no grid, a layer of a
        kind or head shape on a rank the grid does not hold, or heads that do not split evenly
        over `tp`)."""
        states = spec.state_layers()
        if grid is None or not states:
            return None
        keys = set()
        for s in states:
            if s.kind is not StateKind.GATED_DELTANET:
                return None
            if s.key_heads % tp or s.num_heads % tp:
                return None
            keys.add(
                recurrent_shape_key(
                    s.kind, s.key_heads // tp, s.key_dim, s.num_heads // tp, s.head_dim
                )
            )
        if len(keys) != 1:
            return None
        key = keys.pop()
        if key not in grid.decode or key not in grid.prefill:
            return None
        return cls(len(states), key, grid.decode[key], grid.prefill[key], grid)

    def decode_us(self, sequences: float) -> float:
        """One layer's decode kernels over `sequences` one-token decodes, microseconds."""
        value = _along(self.grid.decode_batch, self.decode, sequences)
        assert value is not None, "RecurrentKernels.of: the shape's decode row is timed"
        return value

    def prefill_us(self, chunks: int, tokens: float) -> float:
        """One layer's prefill kernels over `chunks` chunks of `tokens` new tokens in all,
        microseconds (the interpolation rule in the module's docstring)."""
        per = tokens / chunks
        rows = [_along(self.grid.prefill_tokens, row, per) for row in self.prefill]
        value = _along(self.grid.prefill_batch, rows, chunks)
        assert value is not None, "RecurrentKernels.of: the shape's prefill grid is timed"
        return value

    def decode_s(self, sequences: float) -> float:
        """Seconds of every recurrent layer's decode kernels in a step of `sequences` decodes."""
        return self.layers * self.decode_us(sequences) * 1e-6 if sequences else 0.0

    def prefill_s(self, chunks) -> float:
        """Seconds of every recurrent layer's prefill kernels over a step's prefill `chunks`
        ((new tokens, cached tokens), ...)."""
        if not chunks:
            return 0.0
        tokens = sum(n for n, _ in chunks)
        return self.layers * self.prefill_us(len(chunks), max(1, tokens)) * 1e-6
