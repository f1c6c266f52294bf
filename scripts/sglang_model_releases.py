"""The first SGLang release with a model of its own for each bundled checkpoint: the table
kvplan.engines.sglang.SGLANG_OWN_MODEL_FROM holds, derived again from the released wheels.

SGLang's releases are pure-Python wheels. Unpack the ones to scan into one folder per release:

    for v in 0.4.10 0.5.0 0.5.1 ... 0.5.23; do
        pip download --no-deps sglang==$v -d WHEELS/$v && (cd WHEELS/$v && unzip -o -q *.whl 'sglang/srt/models/*')
    done
    python scripts/sglang_model_releases.py WHEELS

A model is SGLang's own from the first release whose srt/models/*.py defines a class named as
the config's architectures[0] (get_model_architecture's lookup; ModelRegistry collects the
EntryClass of every models/ file), and kept in every later release scanned (else it is listed
as dropped). Prints one line per bundled config model_type whose model arrives after the oldest
release scanned, then the ones no scanned release has (the Transformers backend's), and exits 1
where the table in kvplan/engines/sglang.py disagrees with the wheels.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def release_key(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", name))


def scan(wheels: Path) -> tuple[list[str], dict[str, dict[str, str]]]:
    """Releases in order, and per release {file name: source} of srt/models."""
    releases = sorted(
        (p.name for p in wheels.iterdir() if (p / "sglang/srt/models").is_dir()), key=release_key
    )
    sources = {
        r: {
            f.name: f.read_text(errors="replace")
            for f in (wheels / r / "sglang/srt/models").glob("*.py")
        }
        for r in releases
    }
    return releases, sources


def defines(sources: dict[str, str], architecture: str) -> str | None:
    pattern = re.compile(r"^class\s+" + re.escape(architecture) + r"\b", re.M)
    return next((name for name, text in sorted(sources.items()) if pattern.search(text)), None)


def bundled_architectures() -> dict[str, str]:
    """{config model_type: architectures[0]} of the bundled configs."""
    out: dict[str, str] = {}
    for path in sorted((ROOT / "model_configs").glob("*.json")):
        try:
            config = json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError):
            continue
        if isinstance(config, dict) and config.get("architectures") and config.get("model_type"):
            out.setdefault(str(config["model_type"]), str(config["architectures"][0]))
    return out


def first_releases(wheels: Path):
    releases, sources = scan(wheels)
    found, never, dropped = {}, [], []
    for model_type, arch in sorted(bundled_architectures().items()):
        first = next((r for r in releases if defines(sources[r], arch)), None)
        if first is None:
            never.append((model_type, arch))
            continue
        later = releases[releases.index(first) :]
        gone = [r for r in later if not defines(sources[r], arch)]
        if gone:
            dropped.append((model_type, arch, gone))
        if first != releases[0]:
            found[model_type] = (first, arch, "models/" + str(defines(sources[first], arch)))
    return releases, found, never, dropped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wheels", type=Path, help="a folder of unpacked wheels, one per release")
    args = parser.parse_args(argv)
    from kvplan.engines.sglang import SGLANG_OWN_MODEL_FROM

    releases, found, never, dropped = first_releases(args.wheels)
    print(f"releases scanned: {releases[0]} to {releases[-1]} ({len(releases)})")
    wrong = 0
    for model_type, (first, arch, path) in sorted(
        found.items(), key=lambda kv: release_key(kv[1][0])
    ):
        have = SGLANG_OWN_MODEL_FROM.get(model_type)
        want = (release_key(first)[-1], arch, path) if first.startswith("0.5.") else None
        mark = "" if have == want else "   <- the table says " + repr(have)
        wrong += bool(mark)
        print(f"{model_type:22} {first:8} {arch} ({path}){mark}")
    for model_type, arch in never:
        print(f"{model_type:22} none     {arch}: no scanned release has it (Transformers backend)")
    for model_type, arch, gone in dropped:
        print(f"{model_type:22} dropped  {arch} in {', '.join(gone)}")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
