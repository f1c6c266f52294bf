"""The CLI reference (docs/cli.md), generated from the command tree so it cannot drift from it."""

from __future__ import annotations


def command_tree():
    from kvplan.cli import command_tree as tree

    return tree()


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
