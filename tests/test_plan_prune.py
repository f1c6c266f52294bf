"""plan's bound-and-prune: a group of configurations whose saturated rate cannot buy it a place
among the --top cheapest is not bisected. The prune must never change the table: these tests
compare pruned and unpruned searches (a synthetic one that tries many shapes, and real ones), and
check that the progress line is still written, ending at the whole search."""

from __future__ import annotations

import io
import random

import pytest

from kvplan.plans import plan as p
from kvplan.plans.plan import PlanRequest, parse_slo


class _Cand(p.NamedTuple):
    usd_per_hour: float
    num_gpus: int
    goodput_rps: float


def _fake_search(monkeypatch, floors: list[float], costs: list[list], top: int, prune: bool, rng):
    """_run_all over synthetic groups: group i's floor is floors[i], its configurations cost
    costs[i] (None: ruled out); every cost is at least its group's floor, as in the real
    search. The ranked top `top` and how many were pruned."""
    configs = [
        p.Config(
            0,
            tp=1,
            pp=1,
            kv_cache_dtype="auto",
            max_num_seqs=64 * (j + 1),
            max_num_batched_tokens=i,
        )
        for i, group in enumerate(costs)
        for j in range(len(group))
    ]

    def evaluate_group(spec, gpus, request, group, requests, saturated=None, bar=float("inf")):
        i = group[0].max_num_batched_tokens
        by_seats = {64 * (j + 1): c for j, c in enumerate(costs[i])}
        answers = []
        for config in group:
            cost = by_seats[config.max_num_seqs]
            # a floor on the way: anywhere from the group's floor to the cost itself
            floor = floors[i] if cost is None else rng.choice([floors[i], cost])
            if floor > bar:  # the real search stops here
                answers.append((p.PRUNED, floor, None))
            else:
                answers.append(("ruled out" if cost is None else _Cand(cost, 1, 1.0), floor, None))
        return answers

    monkeypatch.setattr(p, "saturate", lambda spec, gpus, request, config, requests: config)
    monkeypatch.setattr(
        p,
        "_usd_floor",
        lambda gpus, request, config, saturated: floors[config.max_num_batched_tokens],
    )
    monkeypatch.setattr(p, "evaluate_group", evaluate_group)
    request = PlanRequest(rate=1, slos=(parse_slo("ttft_p99=1s"),), top=top, prune=prune)
    outcomes, _released = p._run_all(None, [None], request, configs, [], 1, None)
    ranked = sorted(
        ((o, c) for o, c in zip(outcomes, configs, strict=True) if isinstance(o, _Cand)),
        key=lambda oc: (oc[0].usd_per_hour, oc[0].num_gpus, -oc[0].goodput_rps),
    )
    return [c for _, c in ranked[:top]], sum(o == p.PRUNED for o in outcomes)


def test_the_prune_never_drops_a_listed_configuration(monkeypatch):
    rng = random.Random(7)
    pruned_somewhere = 0
    for _ in range(400):
        groups = rng.randint(1, 12)
        floors = [rng.choice([-float("inf"), *range(1, 9)]) for _ in range(groups)]
        costs = []
        for floor in floors:
            base = 0 if floor == -float("inf") else floor
            costs.append(
                [
                    None if rng.random() < 0.2 else base + rng.choice([0, 0, 1, 2, 5])
                    for _ in range(rng.randint(1, 4))
                ]
            )
        top = rng.randint(1, 6)
        exact, none_pruned = _fake_search(monkeypatch, floors, costs, top, False, rng)
        fast, pruned = _fake_search(monkeypatch, floors, costs, top, True, rng)
        assert none_pruned == 0
        assert fast == exact, (floors, costs, top)
        pruned_somewhere += pruned > 0
    assert pruned_somewhere > 50  # the cases exercised the prune


def _small_request(**changes) -> PlanRequest:
    from kvplan.simulate.workload import WorkloadSpec

    request = PlanRequest(
        rate=20,
        slos=(parse_slo("ttft_p99=2s"), parse_slo("tpot_p99=50ms")),
        workload=WorkloadSpec(num_prompts=20, input_len=512, output_len=32),
        tps=(1, 2, 4),
        kv_cache_dtypes=("auto",),
        max_num_seqs=(64, 256),
        max_num_batched_tokens=(2048,),
        top=2,
        jobs=1,
    )
    return request._replace(**changes)


def _plan(request: PlanRequest, gpus=("h100",), progress=None):
    from kvplan.inputs.hardware import load_profile
    from kvplan.inputs.sources import load_model

    return p.plan(
        load_model("llama-3.1-8b"), [load_profile(g) for g in gpus], request, progress=progress
    )


def test_a_pruned_search_lists_what_the_full_one_lists():
    seen = []
    fast = _plan(_small_request(), progress=lambda done, total: seen.append((done, total)))
    full = _plan(_small_request(prune=False))
    assert fast.pruned > 0 and full.pruned == 0
    assert fast.candidates == full.candidates
    assert fast.searched == full.searched and fast.feasible + fast.pruned >= full.feasible
    assert seen[0] == (0, fast.searched)  # written before the first (saturated) run
    assert seen[-1] == (fast.searched, fast.searched)  # the progress line ends at the whole search
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)
    from kvplan.present.plan import plan_view
    from kvplan.present.render import render

    text = render(plan_view(fast), "table")
    assert f"{fast.pruned:,} pruned (a floor on their cost is above the 2 cheapest)" in text
    assert "pruned" not in render(plan_view(full), "table")


@pytest.mark.slow
@pytest.mark.parametrize("top", [1, 3, 10])
def test_pruned_and_full_searches_agree_across_gpus_and_processes(top):
    changes = dict(top=top, kv_cache_dtypes=("auto", "fp8"), max_num_batched_tokens=(2048, 8192))
    gpus = ("h100", "h200", "a100")
    full = _plan(_small_request(prune=False, **changes), gpus=gpus)
    runs = [_plan(_small_request(jobs=jobs, **changes), gpus=gpus) for jobs in (1, 2)]
    for fast in runs:
        assert fast.candidates == full.candidates
        assert fast.feasible + fast.pruned >= full.feasible
    assert runs[0] == runs[1]  # the same prune whatever the processes' timing


def test_the_progress_line_is_written_on_a_terminal_only(monkeypatch):
    from kvplan.cli import plan as cli_plan

    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty, pipe = Tty(), io.StringIO()
    monkeypatch.setattr("sys.stderr", tty)
    cli_plan._progress(5, 10)
    cli_plan._progress(10, 10)
    assert tty.getvalue() == "\rsearched 5/10 configurations\rsearched 10/10 configurations\n"
    monkeypatch.setattr("sys.stderr", pipe)
    cli_plan._progress(5, 10)
    assert pipe.getvalue() == ""
