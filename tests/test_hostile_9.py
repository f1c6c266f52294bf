"""Hostile inputs, ninth round: llama.cpp's --device keywords. `--device none` (llama.cpp's
parse_device_list: offload nothing) printed every layer offloaded to the GPU under the label
"none", and `--device CPU`, which llama.cpp refuses ("invalid device"), ran as a GPU."""

from __future__ import annotations

import pytest

from helpers import one_line_error, run_cli

LLAMA = ("engine", "qwen3-8b", "--engine", "llama.cpp", "--gpu", "h100")


@pytest.mark.parametrize("device", ["none", "NONE", "cpu", "CPU"])
def test_a_device_that_offloads_nothing_is_refused(device):
    code, _, err = run_cli(*LLAMA, "--device", device)
    one_line_error(code, err, "llama.cpp offloads to a GPU device")


def test_a_gpu_device_name_still_labels_the_allocation():
    code, out, _ = run_cli(*LLAMA, "--device", "CUDA0")
    assert code == 0
    assert "CUDA0 KV buffer size" in out
