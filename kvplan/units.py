"""Unit constants, the one place they are written. Inside kvplan every number is in SI base units:
bytes, seconds, FLOP, FLOP/s, bytes/s. Capacities are shown in GiB (2**30); bandwidths in GB/s or
TB/s and throughputs in TFLOP/s (10**9, 10**12), as datasheets quote them. Parsing what people
type lives in kvplan.inputs.options, printing in kvplan.present.format; both use these."""

KIB = 2**10
MIB = 2**20
GIB = 2**30
TIB = 2**40

KB = 10**3
MB = 10**6
GB = 10**9
TB = 10**12

GBIT = 10**9 / 8  # bytes in a gigabit (network links are quoted in Gb/s)

GFLOP = 10**9
TFLOP = 10**12

MS = 1e-3  # seconds per millisecond
US = 1e-6  # seconds per microsecond

TOKENS_K = 1024  # "8k" tokens = 8 x 1024 (the convention of context lengths)
