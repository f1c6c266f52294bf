"""kvplan.kernels: paged KV cache, block manager and decode attention (filled in by issue 5)."""
