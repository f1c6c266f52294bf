"""The native CPU decode kernel against the torch path and an independent dense oracle, at
awkward sizes; its build cache, its fallback without a compiler, and the environment switch."""

from __future__ import annotations

import logging
import os
import time

import pytest

torch = pytest.importorskip("torch")

from kvplan.kernels import native_decode, paged_decode_attention  # noqa: E402

from kv_fixtures import (  # noqa: E402
    all_cases,
    build_paged,
    make_case,
    naive_attention,
    reference64,
    worst_error,
)


def _require_native():
    state = native_decode.status()
    if not state.available:
        pytest.skip(f"native kernel unavailable here: {state.reason}")


@pytest.fixture
def threads():
    """Run at 1 and 2 threads: the second takes the helper pool and, for long single sequences,
    the split-KV merge."""
    before = torch.get_num_threads()
    yield lambda n: torch.set_num_threads(n)
    torch.set_num_threads(before)


CASES = list(all_cases())


@pytest.mark.parametrize("num_threads", [1, 2])
@pytest.mark.parametrize("label,case,window,scale", CASES, ids=[c[0] for c in CASES])
def test_awkward_inputs_against_float64(label, case, window, scale, num_threads, threads):
    """Block sizes 1/3/16/256, GQA 1/4/7, head_dim 64-256, windows, scales, strided query and
    caches (V strides unlike K's), empty sequences: as close to float64 as the torch path."""
    _require_native()
    threads(num_threads)
    native = worst_error(paged_decode_attention, case, window, scale, impl="native")
    torch_path = worst_error(paged_decode_attention, case, window, scale, impl="torch")
    assert native < 2e-5, label
    assert native <= max(2 * torch_path, 1e-6), (label, native, torch_path)


@pytest.mark.parametrize("block_size", [1, 16, 64])
@pytest.mark.parametrize("num_kv_heads,group", [(2, 1), (2, 4), (2, 8), (1, 8)])  # 1, 8: MQA
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_ragged_lengths_gqa_mqa_and_head_dims(block_size, num_kv_heads, group, head_dim):
    _require_native()
    lens = [1, 15, 17, 1025]  # ragged, and not multiples of the block size
    kc, vc, table, dense = build_paged(lens, num_kv_heads, head_dim, block_size, seed=head_dim)
    q = torch.randn(len(lens), num_kv_heads * group, head_dim)
    seq_lens = torch.tensor(lens, dtype=torch.int32)
    native = paged_decode_attention(q, kc, vc, table, seq_lens, impl="native")
    assert not torch.isnan(native).any()
    for b, (k, v) in enumerate(dense):
        torch.testing.assert_close(
            native[b].double(), naive_attention(q[b], k, v), atol=2e-5, rtol=1e-4
        )


@pytest.mark.parametrize("window", [None, 300])
def test_long_single_sequence_splits_and_merges(window, threads):
    """Batch 1 at 4 threads splits the KV (at least 256 tokens a split) and merges the splits;
    the answer must not depend on the thread count."""
    _require_native()
    assert native_decode.num_splits(1, 3000, 4) > 1
    assert native_decode.num_splits(1, 3000, 1) == 1
    q, kc, vc, table, lens, dense = make_case([3000], 2, 4, 64, 16, seed=3)
    want = reference64(q[0], *dense[0], window)
    outs = []
    for num_threads in (1, 4):
        threads(num_threads)
        out = paged_decode_attention(q, kc, vc, table, lens, sliding_window=window, impl="native")
        assert (out[0].double() - want).abs().max() < 2e-5
        outs.append(out)
    torch.testing.assert_close(outs[0], outs[1], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_caches(dtype):
    _require_native()
    lens = [1, 15, 17, 1025]
    kc, vc, table, dense = build_paged(lens, 2, 128, 16, dtype=dtype)
    q = torch.randn(len(lens), 8, 128, dtype=dtype)
    seq_lens = torch.tensor(lens, dtype=torch.int32)
    native = paged_decode_attention(q, kc, vc, table, seq_lens, impl="native")
    torch_path = paged_decode_attention(q, kc, vc, table, seq_lens, impl="torch")
    assert native.dtype == dtype
    torch.testing.assert_close(native.float(), torch_path.float(), atol=1e-2, rtol=1e-2)
    for b, (k, v) in enumerate(dense):  # the oracle on the rounded values
        want = naive_attention(q[b].float(), k.to(dtype).float(), v.to(dtype).float())
        torch.testing.assert_close(native[b].double(), want, atol=2e-2, rtol=2e-2)


def test_blocks_shared_between_sequences():
    """Prefix sharing: two sequences read the same physical blocks."""
    _require_native()
    kc, vc, table, dense = build_paged([40], 2, 64, 16, seed=5)
    k, v = dense[0]
    shared = table[0, :3]
    tables = torch.stack([shared, shared]).to(torch.int32)
    seq_lens = torch.tensor([40, 33], dtype=torch.int32)
    q = torch.randn(2, 8, 64)
    out = paged_decode_attention(q, kc, vc, tables, seq_lens, impl="native")
    torch.testing.assert_close(out[0].double(), naive_attention(q[0], k, v), atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(
        out[1].double(), naive_attention(q[1], k[:33], v[:33]), atol=2e-5, rtol=1e-4
    )


def test_empty_batch_zero_and_one_token():
    _require_native()
    q, kc, vc, table, lens, dense = make_case([0, 1, 0], 2, 4, 64, 16)
    out = paged_decode_attention(q, kc, vc, table, lens, impl="native")
    assert torch.equal(out[0], torch.zeros_like(out[0])) and torch.equal(out[2], out[0])
    torch.testing.assert_close(out[1].double(), reference64(q[1], *dense[1]), atol=1e-6, rtol=0)
    empty = paged_decode_attention(q[:0], kc, vc, table[:0], lens[:0], impl="native")
    assert empty.shape == (0, 8, 64)


def test_a_table_entry_outside_the_cache_is_an_error_not_a_read():
    _require_native()
    q, kc, vc, table, lens, _ = make_case([20], 1, 2, 16, 8)
    table = table.clone()
    table[0, 1] = kc.shape[0]  # one past the last block, inside the sequence's length
    with pytest.raises(ValueError, match="not a block of the cache"):
        paged_decode_attention(q, kc, vc, table, lens, impl="native")


def test_quantized_caches_take_the_torch_path(monkeypatch):
    q, kc, vc, table, lens, _ = make_case([9], 1, 2, 16, 4)
    calls = []
    monkeypatch.setattr(native_decode, "native_decode_attention", lambda *a, **k: calls.append(1))
    int8 = kc.nan_to_num().to(torch.int8)
    scales = torch.ones(kc.shape[:3])
    args = (q, int8, int8, table, lens)
    paged_decode_attention(*args, k_scale=scales, v_scale=scales)  # auto
    assert calls == []
    with pytest.raises(ValueError, match="impl='native' cannot take"):
        paged_decode_attention(*args, k_scale=scales, v_scale=scales, impl="native")


@pytest.fixture
def fresh_build(monkeypatch, tmp_path):
    """A process that has not built the kernel yet, with an empty cache."""
    monkeypatch.setenv("KVPLAN_CACHE", str(tmp_path))
    monkeypatch.delenv(native_decode.ENV_SWITCH, raising=False)
    monkeypatch.setattr(native_decode, "_STATE", None)
    monkeypatch.setattr(native_decode, "_LIBRARY", None)
    return tmp_path


def test_no_compiler_falls_back_and_says_so_once(monkeypatch, fresh_build, caplog):
    monkeypatch.setattr(native_decode, "COMPILER", "kvplan-no-such-compiler")
    q, kc, vc, table, lens, dense = make_case([5, 17], 2, 4, 64, 16)
    with caplog.at_level(logging.WARNING, logger=native_decode.__name__):
        first = paged_decode_attention(q, kc, vc, table, lens)
        second = paged_decode_attention(q, kc, vc, table, lens)
    state = native_decode.status()
    assert not state.available and "kvplan-no-such-compiler" in state.reason
    assert len(caplog.records) == 1 and "torch path" in caplog.records[0].getMessage()
    torch.testing.assert_close(first, second)
    for b, (k, v) in enumerate(dense):
        assert (first[b].double() - reference64(q[b], k, v)).abs().max() < 2e-5
    with pytest.raises(RuntimeError, match="unavailable"):
        paged_decode_attention(q, kc, vc, table, lens, impl="native")


def test_a_failed_build_falls_back_with_the_compiler_output(monkeypatch, fresh_build):
    monkeypatch.setattr(native_decode, "FLAGS", (*native_decode.FLAGS, "-fkvplan-no-such-flag"))
    state = native_decode.status()
    assert not state.available and "kvplan-no-such-flag" in state.reason
    assert list((fresh_build / "native").iterdir()) == []  # nothing half-written left behind


def test_build_is_cached_by_source_hash(monkeypatch, fresh_build):
    if native_decode.shutil.which(native_decode.COMPILER) is None:
        pytest.skip("no C compiler")
    state = native_decode.status()
    assert state.available, state.reason
    assert [p.name for p in (fresh_build / "native").iterdir()] == [
        state.library_path.split("/")[-1]
    ]
    # a second process finds the library: no compile
    monkeypatch.setattr(native_decode, "_STATE", None)
    monkeypatch.setattr(native_decode.subprocess, "run", lambda *a, **k: pytest.fail("rebuilt"))
    assert native_decode.status().library_path == state.library_path


def test_environment_switch_forces_the_torch_path(monkeypatch):
    q, kc, vc, table, lens, _ = make_case([5, 17], 2, 4, 64, 16)
    calls = []
    real = native_decode.native_decode_attention

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(native_decode, "native_decode_attention", spy)
    monkeypatch.setenv(native_decode.ENV_SWITCH, "0")
    assert not native_decode.status().available
    assert "KVPLAN_NATIVE_DECODE=0" in native_decode.status().reason
    off = paged_decode_attention(q, kc, vc, table, lens)
    assert calls == []
    monkeypatch.setenv(native_decode.ENV_SWITCH, "1")
    if not native_decode.status().available:
        pytest.skip(f"native kernel unavailable here: {native_decode.status().reason}")
    on = paged_decode_attention(q, kc, vc, table, lens)
    assert calls == [1]
    torch.testing.assert_close(on, off, atol=2e-6, rtol=1e-5)


def test_the_wheel_ships_the_kernel_source():
    """The build reads the source from the installed package: package data must name it (CI
    installs the wheel and runs from outside the checkout)."""
    from importlib import resources
    from pathlib import Path

    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    line = next(
        line
        for line in pyproject.read_text(encoding="utf-8").splitlines()
        if line.startswith('"kvplan.kernels" =')
    )
    assert '"*.c"' in line.partition("#")[0]
    source = resources.files("kvplan.kernels").joinpath(native_decode.SOURCE_NAME)
    assert b"int paged_decode_cpu(" in source.read_bytes()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_starts_its_own_threads(threads):
    """The parent's helper threads do not exist in a child (a data loader's worker, a server's
    fork): the child must neither hang on them nor get another answer."""
    _require_native()
    threads(2)
    q, kc, vc, table, lens, _ = make_case([3000, 700], 2, 4, 64, 16, seed=3)
    want = paged_decode_attention(q, kc, vc, table, lens, impl="native")  # the pool starts
    pid = os.fork()
    if pid == 0:
        got = paged_decode_attention(q, kc, vc, table, lens, impl="native")
        os._exit(0 if torch.equal(got, want) else 1)
    deadline = time.monotonic() + 60
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung")
    assert os.waitstatus_to_exitcode(done[1]) == 0
