"""The API server's per-request and per-token costs, in a module of its own: `capacity --gpu`
prices a step with them without loading the simulator (kvplan.simulate.cluster re-exports it)."""

from __future__ import annotations

from kvplan.record import NamedTuple


class Frontend(NamedTuple):
    """The API server's costs (seconds), from BLIS's trained alpha coefficients
    (inference-sim docs/guide/latency-models.md): alpha_0 per request (HTTP parsing, validation,
    tokenization, queue insertion) and alpha_2 per output token (incremental detokenization and
    streaming)."""

    request_s: float = 15.563e-3
    per_token_s: float = 45.91e-6
