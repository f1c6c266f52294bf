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
    # the part of request_s one server process does for each request in turn (0: none timed).
    # SGLang parses, validates, applies the chat template, tokenizes and hands each request to
    # the scheduler in its one HTTP server process (engines.sglang.frontend_serial_request_s):
    # at a burst the requests reach the scheduler one such interval apart
    serial_request_s: float = 0.0

    def served_s(self, start_s: float, free_s: float) -> float:
        """When the engine sees a request sent at `start_s` whose server process is free from
        `free_s`: `request_s` after it alone; its serial part waits for the requests before it
        (one server process each, first come first served)."""
        alone_s = start_s + self.request_s
        if self.serial_request_s <= 0.0:  # nothing done in turn: no request waits
            return alone_s
        return max(alone_s - self.serial_request_s, free_s) + self.serial_request_s
