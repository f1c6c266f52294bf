"""The CLI reference (docs/cli.md), generated from the command tree so it cannot drift from it."""

from __future__ import annotations


def command_tree():
    from kvplan.cli import command_tree as tree

    return tree()


OUTPUT = [
    "## Output formats",
    "",
    "- `table` (the default). In a terminal, each table fits its width (`$COLUMNS`, else the",
    "  terminal's): long text columns are stacked under the table, low-priority columns are hidden",
    "  and named in a line under it (`--format csv` or `json` has every column), long facts and",
    "  notes wrap with a hanging indent, and verdicts are coloured (fits, does not fit, lossless,",
    "  FAILED). `NO_COLOR` turns colour off, `TERM=dumb` too; `FORCE_COLOR` turns it on, even",
    "  into a pipe. Piped or redirected, the table is plain aligned text with every column (long text",
    "  columns stacked under it past `$COLUMNS`, else 100 columns) and no escape codes.",
    "- `markdown`. Facts and tables as Markdown tables; every note is a footnote cited where it",
    "  applies (notes about the whole output from its first fact), so GitHub and pandoc render them",
    "  all.",
    "- `csv`. One table that the csv module and pandas load: a header of unique field names (the",
    "  JSON names, units in the names: `_bytes`, `_s`), raw SI values, one row per table row. With",
    "  several tables (`size --breakdown`, `engine`), a leading `table` field names each row's table",
    "  and rows leave other tables' fields empty. Numbers stated above the table are fields repeated",
    "  on every row (capacity's answer: `planned_max_concurrency`, `kv_tokens`, `fits`, the",
    "  budget). No comment lines: the notes go to standard error, one `note: ...` line each.",
    '- `json`. The typed result: field names carry their units, notes are `{"id", "text"}`.',
    "",
    "## Output files",
    "",
    "- `--out`, `--plot`, `--timeline`, `--json`, `--junit-xml`, `--save-profile`: `-` (where",
    "  allowed) is standard output. A file is written atomically: a temporary file in the same",
    "  folder, renamed over the target, so a crash or a full disk never leaves it half-written.",
    "- Only regular files are written. A symbolic link is followed: the file it points to is",
    "  replaced atomically (the temporary file in that file's folder) and the link is kept. An",
    "  existing device, FIFO (named pipe) or socket is refused with an `error:` line, never",
    "  replaced by a regular file: to feed a pipe, print to standard output and redirect.",
    "- Every output path is checked before any work is done (`measure` checks them all before it",
    "  measures): the folder must exist and the target must not be a folder or a special file.",
    "  Two outputs of one command that resolve to the same file (`--plot x.png --timeline x.png`,",
    "  or through a link) are refused, and so is an output that is a file the command read (its",
    "  config.json, GGUF, `--trace` or `--gpu` YAML; `measure`'s `--baseline` excepted, which a",
    "  run may update).",
    "- A file kvplan names itself is never overwritten silently: `report`'s charts beside `--out`",
    "  and `explore`'s default `kvcache.html` need `--force` when they exist (or, for `explore`,",
    "  an explicit `--out`).",
    "- A command that writes several files (`report` and its charts; `simulate --plot --timeline",
    "  --out`; `measure --json --junit-xml --save-profile`) writes all of them or none: each is",
    "  complete in its temporary file before any is renamed into place, and what goes to standard",
    "  output follows them. A failure (a full disk on the second chart) or a signal leaves none of",
    "  this run's files, and a file it was replacing is put back, so a retry is never blocked.",
    "",
    "## Signals",
    "",
    "- SIGTERM, SIGINT (Ctrl-C) and SIGHUP stop kvplan promptly with one line (`error: stopped by",
    "  SIGTERM`) and the shell's exit code, 128 + the signal (143, 130, 129): temporary files and",
    "  the unfinished outputs of the run are removed, and the worker processes of `plan` and the",
    "  ranks of `measure --distributed` are ended (they also die if kvplan is killed outright).",
    "  A signal the caller ignores (`nohup`) stays ignored.",
    "",
]


def cli_reference_markdown() -> str:
    group = command_tree()
    out = [
        "# CLI reference",
        "",
        "Generated from the command tree by `python scripts/regen_docs.py`; a test fails when this",
        "page and the commands disagree. Every command prints `--format table|markdown|csv|json`",
        "unless noted, exits 2 with a one-line `error:` on bad input, and has a Python twin",
        "([python-api.md](python-api.md)).",
        "",
        *OUTPUT,
    ]
    for name in sorted(group.commands):
        cmd = group.commands[name]
        out += [f"## kvplan {name}", "", " ".join((cmd.help or "").split()), ""]
        if cmd.epilog:
            out += [cmd.epilog.strip(), ""]
        args = [p for p in cmd.params if p.param_type_name == "argument"]
        opts = [p for p in cmd.params if p.param_type_name == "option" and p.name != "help"]
        for arg in args:
            out.append(f"- `{arg.name.upper()}` — {getattr(arg, 'help', '') or ''}".rstrip())
        out += ["", "| option | meaning | default |", "|---|---|---|"]
        for opt in opts:
            flags = ", ".join(f"`{o}`" for o in opt.opts + opt.secondary_opts)
            default = opt.default
            if hasattr(default, "value"):
                default = default.value
            shown = "" if default in (None, False, ()) else f"`{default}`"
            out.append(f"| {flags} | {(opt.help or '').replace('|', '/')} | {shown} |")
        out.append("")
    return "\n".join(out)
