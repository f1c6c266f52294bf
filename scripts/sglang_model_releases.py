"""SGLang's own model classes by release, derived from the released wheels: the table
kvplan/data/sglang_models.json that kvplan.engines.sglang.sglang_own_model_from reads.

SGLang's releases are pure-Python wheels. Unpack the ones to scan into one folder per release:

    for v in 0.4.10 0.5.0 0.5.1 ... 0.5.23; do
        pip download --no-deps sglang==$v -d WHEELS/$v && (cd WHEELS/$v && unzip -o -q *.whl 'sglang/srt/models/*')
    done
    python scripts/sglang_model_releases.py WHEELS --write

A release serves an architecture as SGLang's own where a srt/models file lists it in its
EntryClass and defines the class (ModelRegistry keys each EntryClass entry on the class's
__name__; get_model_architecture finds the config's architectures there, else hands the model to
the Transformers backend). The table keeps, per architecture, the first scanned release with it
and its file there, and the releases scanned. Without --write it prints the bundled checkpoints'
rows and exits 1 where the data file disagrees with the wheels.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DATA = ROOT / "kvplan" / "data" / "sglang_models.json"
_ENTRY = re.compile(r"^EntryClass\s*=\s*(\[[^\]]*\]|[A-Za-z_][A-Za-z0-9_]*)", re.M | re.S)


def release_key(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", name))


def registered(text: str) -> set[str]:
    """The architectures one models/ file registers: its EntryClass names it defines as
    classes (an alias registers its class's own name)."""
    names: set[str] = set()
    for match in _ENTRY.finditer(text):
        for name in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", match.group(1)):
            if re.search(r"^class\s+" + re.escape(name) + r"\b", text, re.M):
                names.add(name)
    return names


def scan(wheels: Path) -> tuple[list[str], dict[str, dict[str, str]]]:
    """Releases in order, and per release {architecture: its models/ file}."""
    releases = sorted(
        (p.name for p in wheels.iterdir() if (p / "sglang/srt/models").is_dir()), key=release_key
    )
    out: dict[str, dict[str, str]] = {}
    for release in releases:
        found: dict[str, str] = {}
        for path in sorted((wheels / release / "sglang/srt/models").glob("*.py")):
            for name in registered(path.read_text(errors="replace")):
                found.setdefault(name, f"models/{path.name}")
        out[release] = found
    return releases, out


def first_releases(wheels: Path) -> dict:
    """The data file's content: the releases scanned, and per architecture the first release
    registering it, its file there, and the later releases that no longer do (if any)."""
    releases, found = scan(wheels)
    table: dict[str, dict] = {}
    for index, release in enumerate(releases):
        for name, path in sorted(found[release].items()):
            if name not in table:
                gone = [r for r in releases[index:] if name not in found[r]]
                table[name] = {
                    "first": release,
                    "path": path,
                    **({"dropped": gone} if gone else {}),
                }
    return {"releases": releases, "architectures": dict(sorted(table.items()))}


def bundled_architectures() -> dict[str, str]:
    """{architectures[0]: config file} of the bundled configs."""
    out: dict[str, str] = {}
    for path in sorted((ROOT / "model_configs").glob("*.json")):
        try:
            config = json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError):
            continue
        names = config.get("architectures") if isinstance(config, dict) else None
        if isinstance(names, list) and names and isinstance(names[0], str):
            out.setdefault(names[0], path.name)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wheels", type=Path, help="a folder of unpacked wheels, one per release")
    parser.add_argument("--write", action="store_true", help=f"write {DATA.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    derived = first_releases(args.wheels)
    data = {
        "about": "SGLang's own model classes: per architecture (a config's architectures[0]) "
        "the first scanned release whose srt/models registers it (EntryClass) and its file "
        "there; an architecture no scanned release registers runs on SGLang's Transformers "
        "backend. Read by kvplan.engines.sglang.sglang_own_model_from.",
        "source": "the PyPI wheels sglang==" + ", ".join(derived["releases"]),
        "derived_by": "python scripts/sglang_model_releases.py WHEELS --write",
        **derived,
    }
    if args.write:
        DATA.write_text(json.dumps(data, indent=1) + "\n")
    current = json.loads(DATA.read_text()) if DATA.exists() else {}
    print(f"releases scanned: {derived['releases'][0]} to {derived['releases'][-1]}")
    for arch, config in sorted(bundled_architectures().items()):
        row = derived["architectures"].get(arch)
        print(f"{arch:42} {row['first'] if row else 'none (Transformers backend)'}  ({config})")
    return 0 if current.get("architectures") == derived["architectures"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
