"""`kvplan gpus`: the bundled hardware profiles and their ridge points."""

from __future__ import annotations

from kvplan.formulas.roofline import ridge_flop_per_byte
from kvplan.inputs.hardware import bundled_profiles, configuration_names
from kvplan.notes import Note, note
from kvplan.record import NamedTuple


class GpuRow(NamedTuple):
    key: str
    name: str
    aliases: str
    memory_bytes: float
    memory_reported_bytes: float | None
    memory_bandwidth_bytes_per_s: float
    bf16_peak_flop_per_s: float
    ridge_bf16_flop_per_byte: float
    ridge_fp8_flop_per_byte: float | None
    # the --gpu spellings of the memory sizes it is sold with (Apple: m3-max-36gb, ...); the
    # figures above are the largest, and a bare name is refused
    memory_configurations: str = ""


class GpusResult(NamedTuple):
    gpus: list[GpuRow]
    notes: tuple[Note, ...]


def gpus() -> GpusResult:
    """The Python twin of `kvplan gpus`."""
    rows = [
        GpuRow(
            key,
            p.name,
            ", ".join(p.aliases),
            p.memory_bytes,
            p.memory_reported_bytes,
            p.memory_bandwidth_bytes_per_s,
            p.peak("bf16"),
            ridge_flop_per_byte(p.peak("bf16"), p.memory_bandwidth_bytes_per_s),
            (
                ridge_flop_per_byte(p.peak("fp8"), p.memory_bandwidth_bytes_per_s)
                if "fp8" in p.peak_flop_per_s
                else None
            ),
            ", ".join(configuration_names(p)),
        )
        for key, p in bundled_profiles().items()
    ]
    return GpusResult(rows, (note("gpus-dense"),))
