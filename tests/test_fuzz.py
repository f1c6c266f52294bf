"""Random and truncated configs: a clean KvplanError or a valid result, never anything else."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvplan.dtypes import KvFormat
from kvplan.errors import KvplanError
from kvplan.formulas.kv import kv_bytes_per_sequence
from kvplan.inputs.architectures import build_model
from kvplan.inputs.sources import parse_config_text
from kvplan.plans.size import SizeRequest, size
from kvplan.present.view import jsonable

from helpers import REPO

CONFIGS = sorted((REPO / "model_configs").glob("*.json"))
CONFIGS = [p for p in CONFIGS if p.name != "index.json"]

junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 1 << 40),
    st.floats(allow_nan=True),
    st.text(max_size=5),
    st.lists(st.integers(-2, 3), max_size=4),
    st.just({}),
)


def check(config: dict) -> None:
    try:
        spec = build_model(config, "fuzz")
        report = size(
            spec, SizeRequest(contexts=(1, 4096), batches=(1, 3), kv_dtypes=("auto", "int4"))
        )
    except KvplanError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    for row in jsonable(report)["rows"]:
        assert row["kv_bytes_per_sequence"] >= 0
        assert row["kv_bytes_total"] == row["kv_bytes_per_sequence"] * row["batch_size"]
    json.dumps(jsonable(report), allow_nan=False)
    assert kv_bytes_per_sequence(spec, 8, KvFormat("bf16")) >= 0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(CONFIGS), st.data())
def test_mutated_real_configs(path, data):
    config = json.loads(path.read_text())
    target = config.get("text_config", config)
    keys = sorted(target)
    for _ in range(data.draw(st.integers(1, 4))):
        key = data.draw(st.sampled_from(keys))
        if data.draw(st.booleans()):
            target.pop(key, None)
        else:
            target[key] = data.draw(junk)
    check(config)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "model_type",
                "hidden_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
                "head_dim",
                "vocab_size",
                "intermediate_size",
                "sliding_window",
                "layer_types",
                "text_config",
                "kv_lora_rank",
                "hybrid_override_pattern",
            ]
        ),
        junk,
        max_size=10,
    )
)
def test_random_configs(config):
    check(config)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_truncated_json_is_a_clean_error(path):
    text = path.read_text()
    rng = random.Random(path.name)
    for cut in sorted(rng.sample(range(1, len(text) - 1), 5)):
        try:
            check(parse_config_text(text[:cut], path.name))
        except KvplanError as exc:
            assert "invalid JSON" in str(exc)


def test_absurd_layer_counts_are_refused_not_built():
    """Found in CI: a fuzzed config with ~2 billion layers exhausted memory building them."""
    from kvplan.errors import KvplanError

    config = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_hidden_layers": 2_000_000_000,
        "num_attention_heads": 4,
        "intermediate_size": 128,
        "vocab_size": 10,
    }
    try:
        build_model(config, "huge")
    except KvplanError as exc:
        assert "num_hidden_layers" in str(exc) and "out of range" in str(exc)
    else:
        raise AssertionError("a 2-billion-layer config was accepted")
