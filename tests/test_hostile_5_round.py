"""Hostile inputs, fifth round, the round after the fixes: what an independent campaign on the
new code paths (escaping, the resolution order, engine length limits, bounds, signals, output
files) still found. Each case ends in a correct answer or one `error:` line with exit 2, never a
traceback, an internal error or a silent wrong number."""

from __future__ import annotations

import pytest

from helpers import run_cli


def one_line_error(code: int, err: str, needle: str) -> str:
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and "internal error" not in err
    assert needle in err, err
    return err


# ---- `~user` naming no home folder -------------------------------------------------------------
@pytest.mark.parametrize(
    "argv, needle",
    [
        (("size", "~kvplan-no-such-user/config.json"), "no such config file"),
        (("size", "~kvplan-no-such-user"), "no such config file"),
        (("size", "~kvplan-no-such-user/m.gguf"), "no such GGUF file"),
        (("capacity", "llama-3.1-8b", "--gpu", "~kvplan-no-such-user/g.yaml"), "no such profile"),
        (("capacity", "llama-3.1-8b", "--gpu", "~kvplan-no-such-user"), "unknown GPU"),
    ],
)
def test_a_tilde_of_an_unknown_user_is_no_such_file(argv, needle):
    # Path.expanduser raises RuntimeError for ~user with no such user: it was an internal error
    code, _, err = run_cli(*argv)
    one_line_error(code, err, needle)
