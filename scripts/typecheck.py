"""Type-check kvplan with mypy: `python scripts/typecheck.py [mypy options]` (CI runs it).

The configuration is pyproject.toml's [tool.mypy]. What this adds to `python -m mypy` is the
folders setup.py ships inside the package: kernels/ is imported as `kvplan.kernels` (and
model_configs/, hardware_profiles/ likewise), a mapping mypy cannot follow (it names a file's
module by its folders), so `python -m mypy` alone reports every `kvplan.kernels` import as
missing and never checks the kernels. Here each file of a
mapped folder is handed to mypy under its installed module name. Exit status: mypy's (0 clean,
1 type errors, 2 a usage error).
"""

import ast
import sys
import time
from pathlib import Path

from mypy import build
from mypy.errors import CompileError
from mypy.main import process_options
from mypy.modulefinder import BuildSource

ROOT = Path(__file__).resolve().parent.parent


def setup_mapping() -> dict[str, str]:
    """setup.py's MAPPED (package -> folder), read from its source: one home for the mapping."""
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "MAPPED" for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise SystemExit("setup.py has no MAPPED: scripts/typecheck.py cannot find kernels/")


def mapped_sources() -> list[BuildSource]:
    """One BuildSource per .py file of each mapped folder, named as installed."""
    sources = []
    for package, folder in setup_mapping().items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            module = ".".join((package, *parts))
            sources.append(BuildSource(str(path.relative_to(ROOT)), module, None, str(ROOT)))
    return sources


def main(argv: list[str]) -> int:
    start = time.perf_counter()
    config = ["--config-file", str(ROOT / "pyproject.toml")]
    sources, options = process_options([*config, *argv])
    sources += mapped_sources()
    try:
        result = build.build(sources, options, stdout=sys.stdout, stderr=sys.stderr)
        messages = result.errors
    except CompileError as error:  # a syntax error, or a blocker such as a duplicate module
        messages = error.messages
    for line in messages:
        print(line)
    errors = sum(": error: " in line for line in messages)
    files = len({line.split(":", 1)[0] for line in messages if ": error: " in line})
    seconds = time.perf_counter() - start
    if errors:
        plural = ("s" if errors != 1 else "", "s" if files != 1 else "")
        print(
            f"Found {errors} error{plural[0]} in {files} file{plural[1]} "
            f"(checked {len(sources)} source files)"
        )
        return 1
    print(f"Success: no issues found in {len(sources)} source files ({seconds:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
