"""Fit the ratios that let one GPU borrow another's attention-backend rows it lacks.

    python scripts/derive_transfer.py            # writes kvplan/data/kernel_tables/transfer.json
    python scripts/derive_transfer.py --check    # exit 1 where the file differs from a rerun

Some attention backends an engine runs have rows on one GPU but not on another of the same
vendor: SGLang's Triton backend has MLA rows on the L40S and the RTX PRO 6000 only, MHA rows on
every GPU with SGLang tables. For each (engine, backend, kind) that GPU X lacks and GPU Y (same
vendor, same engine, same engine version) has, where both have rows of the same backend for the
other kind (the same kernels: SGLang's triton_backend runs MHA and MLA through one
decode_attention / extend_attention kernel family), this writes X's time over Y's at every
call both timed (same phase, cache dtype, head shape, batch or units, bytes or tokens), and
kvplan.inputs.kernel_tables prices X's missing calls as Y's times that ratio (curves by batch,
linear in log(bytes) between the shared points, their ends beyond).

Only kernel-level data are read: the attention/ files scripts/derive_achieved.py wrote from
aiconfigurator-core's per-kernel rows. Where several GPUs have the rows, the one sharing the
most calls with X lends them. The vendor-tuned backends both GPUs ran (FlashInfer) are fitted
the same way and stored beside (`vendor_tuned`), not used: Triton's kernels are not tuned per
architecture, and their ratio says so (compare the medians)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLES = ROOT / "kvplan" / "data" / "kernel_tables"
ATTENTION = TABLES / "attention"
OUT = TABLES / "transfer.json"
sys.path.insert(0, str(Path(__file__).resolve().parent))

from derive_achieved import TABLE_GPUS  # noqa: E402


def profile(gpu: str) -> dict:
    """kvplan's own profile of a table GPU (hardware_profiles/<stem>.yaml), as read."""
    import yaml

    path = ROOT / "hardware_profiles" / f"{TABLE_GPUS[gpu][0]}.yaml"
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def vendor(gpu: str) -> str:
    """The vendor of a table GPU, from kvplan's own profile of it."""
    return str(profile(gpu)["vendor"])


def datasheets() -> dict:
    """{gpu: {profile, memory_bandwidth_bytes_per_s, peak_flop_per_s}} of every table GPU: the
    rates of the GPU its tables ran on (kvplan.inputs.kernel_tables.same_silicon compares a
    borrowing profile's with them)."""
    out = {}
    for gpu in sorted(TABLE_GPUS):
        data = profile(gpu)
        out[gpu] = {
            "profile": f"hardware_profiles/{TABLE_GPUS[gpu][0]}.yaml",
            "memory_bandwidth_bytes_per_s": float(data["memory_bandwidth_bytes_per_s"]),
            "peak_flop_per_s": {k: float(v) for k, v in sorted(data["peak_flop_per_s"].items())},
        }
    return out


def backends() -> dict:
    """{(gpu, engine): (version, {"kind:backend": entry})} of the attention/ files, the newest
    release's of each GPU and engine (a run of an older release reads what is fitted on them:
    kvplan.inputs.kernel_tables._borrowed_version)."""
    from kvplan.inputs.kernel_tables import release_order

    out = {}
    for path in sorted(ATTENTION.glob("*.json")):
        gpu, engine, version = path.name[: -len(".json")].split(".", 2)
        held = out.get((gpu, engine))
        if held is not None and release_order(held[0]) > release_order(version):
            continue
        out[(gpu, engine)] = (version, json.loads(path.read_text(encoding="utf-8"))["backends"])
    return out


def _calls(entry: dict) -> dict:
    """{(phase, dtype, head, key, x): seconds} of one backend's decode and prefill calls (head:
    the decode calls' query heads on the rank, the prefill calls' head shape)."""
    out = {}
    for dtype, by_heads in entry["decode_calls"].items():
        for heads, by_batch in by_heads.items():
            for batch, curve in by_batch.items():
                for x, s in curve:
                    out[("decode", dtype, heads, int(batch), float(x))] = s
    for dtype, heads in entry.get("prefill_calls", {}).items():
        for head, by_units in heads.items():
            for units, curve in by_units.items():
                for x, s in curve:
                    out[("prefill", dtype, head, int(units), float(x))] = s
    return out


def ratios(target: dict, source: dict) -> dict:
    """{phase: {key: [[x, ratio], ...]}}: the target's time over the source's at every call both
    timed, the median over the dtypes and head shapes that share a (key, x)."""
    a, b = _calls(target), _calls(source)
    pooled: dict = {}
    for call in sorted(set(a) & set(b)):
        phase, _, _, key, x = call
        pooled.setdefault(phase, {}).setdefault(key, {}).setdefault(x, []).append(a[call] / b[call])
    return {
        phase: {
            str(key): [[x, round(statistics.median(r), 4)] for x, r in sorted(by_x.items())]
            for key, by_x in sorted(by_key.items())
        }
        for phase, by_key in pooled.items()
    }


def summary(fit: dict) -> dict:
    """{phase: {"calls": n, "median": m, "range": [lo, hi]}} of a fit."""
    out = {}
    for phase, by_key in fit.items():
        values = [r for curve in by_key.values() for _, r in curve]
        out[phase] = {
            "calls": len(values),
            "median": round(statistics.median(values), 4),
            "range": [min(values), max(values)],
        }
    return out


def shared_calls(fit: dict) -> int:
    return sum(len(curve) for by_key in fit.values() for curve in by_key.values())


def fits() -> list[dict]:
    """One entry per (engine, backend, kind) a GPU lacks that a same-vendor GPU lends."""
    files = backends()
    vendors = {gpu: vendor(gpu) for gpu, _ in files}
    out = []
    for (gpu, engine), (version, own) in sorted(files.items()):
        for other_kind, kind in (("mha", "mla"), ("mla", "mha")):
            for name in sorted(own):
                k, backend = name.split(":", 1)
                missing = f"{kind}:{backend}"
                if k != other_kind or missing in own:
                    continue
                candidates = []
                for (lender, e), (lender_version, theirs) in sorted(files.items()):
                    if (
                        lender == gpu
                        or e != engine
                        or lender_version != version
                        or vendors[lender] != vendors[gpu]
                        or missing not in theirs
                        or name not in theirs
                        or theirs[name]["kernel_source"] != own[name]["kernel_source"]
                        or theirs[missing]["kernel_source"] != own[name]["kernel_source"]
                    ):
                        continue
                    fit = ratios(own[name], theirs[name])
                    if "decode" in fit:
                        candidates.append((-shared_calls(fit), lender, fit, theirs))
                if not candidates:
                    continue
                _, lender, fit, theirs = min(candidates, key=lambda c: (c[0], c[1]))
                tuned = {
                    n: summary(ratios(own[n], theirs[n]))
                    for n in sorted(set(own) & set(theirs))
                    if n.split(":", 1)[1] != backend
                }
                out.append(
                    {
                        "engine": engine,
                        "version": version,
                        "backend": f"{kind}:{backend}",
                        "gpu": gpu,
                        "lender": lender,
                        "vendor": vendors[gpu],
                        "fitted_on": name,
                        "kernel_source": own[name]["kernel_source"],
                        "summary": summary(fit),
                        "ratio": fit,
                        "vendor_tuned": {n: s for n, s in tuned.items() if s},
                    }
                )
    return out


def document() -> dict:
    return {
        "about": (
            "Per (engine, attention backend, kind) a GPU's tables lack and a GPU of the same "
            "vendor, engine and engine version has: the lender, and the borrower's time over "
            "the lender's at every call both timed for the same backend's other kind (ratio: "
            "phase -> batch (decode) or sequences x query heads (prefill) -> [[KV bytes per "
            "sequence or prompt tokens, ratio], ...], the median over cache dtypes and head "
            "shapes, and over the decode calls' query heads on the rank). kvplan.inputs.kernel_tables.borrowed_backends prices the missing "
            "backend as the lender's calls times the ratio at the call's batch and size; a run "
            "using it is in the 'borrowed' interval class. vendor_tuned: the same ratios' "
            "summary for the other backends both GPUs ran, for comparison (not used)."
        ),
        "derived_by": "python scripts/derive_transfer.py",
        "source": "kvplan/data/kernel_tables/attention/*.json (aiconfigurator-core kernel rows)",
        "borrowed": fits(),
        "datasheet_about": (
            "The datasheet rates of each table GPU, from kvplan's profile of it: a profile that "
            "borrows a GPU's tables (kernel_tables: {borrowed: ...}) uses that GPU's measured "
            "kernel times (the dsa/, moe/, attention/, gemm/, recurrent/ grids) only where its "
            "own rates are these (kvplan.inputs.kernel_tables.same_silicon), else the fractions."
        ),
        "datasheet": datasheets(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the file, no write")
    args = parser.parse_args()
    text = json.dumps(document(), indent=1) + "\n"
    if args.check:
        same = OUT.is_file() and OUT.read_text(encoding="utf-8") == text
        print(f"{OUT.relative_to(ROOT)}: {'up to date' if same else 'differs from a rerun'}")
        sys.exit(0 if same else 1)
    OUT.write_text(text, encoding="utf-8")
    doc = json.loads(text)
    for e in doc["borrowed"]:
        s = e["summary"]
        tuned = "; ".join(
            f"{n} decode {v['decode']['median']}"
            for n, v in e["vendor_tuned"].items()
            if "decode" in v
        )
        print(
            f"{e['gpu']} {e['engine']} {e['backend']} <- {e['lender']}: decode median "
            f"{s['decode']['median']} over {s['decode']['calls']} calls "
            f"(range {s['decode']['range'][0]}..{s['decode']['range'][1]})"
            + (
                f", prefill {s['prefill']['median']} over {s['prefill']['calls']}"
                if "prefill" in s
                else ""
            )
            + (f"; vendor-tuned: {tuned}" if tuned else "")
        )
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
