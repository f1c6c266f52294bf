"""The command line: each command parses its options, makes one library call, and renders.

Nothing here computes; every command has a Python twin in the library (docs/python-api.md). Each
command lives in its own module, imported only when that command runs (the start-up budget)."""

import functools
import importlib
import os
import sys

import typer

from kvplan.cli import signals
from kvplan.errors import KvplanError

HELP = "Plan the KV cache of an LLM deployment from its config.json and a hardware profile."

# command -> (module, function that adds it to an app), in the order `kvplan --help` lists them
COMMANDS = {
    "size": ("kvplan.cli.size", "add"),
    "capacity": ("kvplan.cli.capacity", "add"),
    "engine": ("kvplan.cli.engine", "add"),
    "fit": ("kvplan.cli.fit", "add"),
    "roofline": ("kvplan.cli.roofline", "add"),
    "whatif": ("kvplan.cli.whatif", "add"),
    "report": ("kvplan.cli.report", "add"),
    "explore": ("kvplan.cli.explore", "add"),
    "measure": ("kvplan.cli.measure", "add"),
    "simulate": ("kvplan.cli.simulate", "add"),
    "plan": ("kvplan.cli.plan", "add"),
    "models": ("kvplan.cli.catalog", "add_models"),
    "gpus": ("kvplan.cli.catalog", "add_gpus"),
    "explain": ("kvplan.cli.explain", "add"),
}


# (command, option) pairs that moved: the usage error says where to
MOVED_OPTIONS = {
    ("capacity", "--engine"): (
        "capacity is engine-free; an engine's own allocation and log lines are "
        "`kvplan engine MODEL --engine vllm|sglang|llama.cpp --gpu GPU`"
    ),
}


def _moved(argv: list[str], exc: Exception) -> str | None:
    option = getattr(exc, "option_name", None)
    return MOVED_OPTIONS.get((argv[0], option)) if argv and option else None


def _ascii_numbers() -> None:
    """Every int and float option (click's number types, ranges included) refuses a character
    outside ASCII before Python's int()/float() reads `١٢٨` or `１２８` as 128, and a number
    too large for a float (`1e309`, which float() reads as inf where nobody typed inf)."""
    try:  # typer 0.2x carries its own copy of click
        from typer._click import types
    except ImportError:
        from click import types  # type: ignore[no-redef]  # the same module, before typer 0.20
    base = getattr(types, "_NumberParamTypeBase", None)  # click 8's; the options' own parsers
    if base is None or getattr(base.convert, "kvplan_ascii", False):  # still check the rest
        return
    convert = base.convert

    def ascii_convert(self, value, param, ctx):
        what = param.opts[0] if param is not None and param.opts else "value"
        if isinstance(value, str) and not value.isascii():
            from kvplan.inputs.options import ascii_number

            ascii_number(value, what)
        number = convert(self, value, param, ctx)
        if (
            isinstance(value, str)
            and isinstance(number, float)
            and number in (float("inf"), float("-inf"))
            and "inf" not in value.lower()
        ):
            raise KvplanError(f"{what} {value[:40]!r} is beyond a float's range (about 1.8e308)")
        return number

    ascii_convert.kvplan_ascii = True  # type: ignore[attr-defined]  # a mark on the function
    base.convert = ascii_convert


def _new_app() -> typer.Typer:
    _ascii_numbers()
    app = typer.Typer(
        name="kvplan",
        help=HELP,
        add_completion=True,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["--help", "-h"]},
    )
    app.callback(invoke_without_command=True)(_root)
    return app


def _root(
    version: bool = typer.Option(False, "--version", "-V", help="Print kvplan's version and exit."),
) -> None:
    """Plan the KV cache of an LLM deployment from its config.json and a hardware profile."""
    if version:
        from kvplan import __version__

        typer.echo(f"kvplan {__version__}")
        raise typer.Exit(0)


def build_app(names: list[str] | None = None) -> typer.Typer:
    """An app holding `names` (every command when None)."""
    app = _new_app()
    for name in names or list(COMMANDS):
        module, function = COMMANDS[name]
        getattr(importlib.import_module(module), function)(app)
    return app


def command_tree():
    """The click group of the whole CLI (docs and tests read it)."""
    return typer.main.get_command(build_app())


def _command_for(argv: list[str]):
    """For `kvplan <command> ...`, the click command of an app holding only that command, so
    typer builds one command's parameters instead of all of them; else the whole app's (help,
    completion). Built once per process: a caller that runs several commands in one process
    (the Python API's users, the tests) does not rebuild typer's parameters for each."""
    completing = any(key.startswith("_KVPLAN_COMPLETE") for key in os.environ)
    if argv and argv[0] in COMMANDS and not completing:
        return _built(argv[0])
    return _built(None)


@functools.cache
def _built(name: str | None):
    return typer.main.get_command(build_app([name] if name else None))


def _usable_streams() -> None:
    """Output never crashes on the stream it goes to: a closed stdout is a null device, and an
    encoding that cannot hold the tables' characters (LANG=C without UTF-8, latin-1) gets '?'
    in their place."""
    if sys.stdout is None:
        sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 (lives as long as we do)
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
        if encoding not in ("utf8", "utf16", "utf32") and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    _usable_streams()
    from kvplan.atomic import forget_inputs

    forget_inputs()  # the files an earlier command in this process read are not this one's
    if not argv:
        argv = ["--help"]  # bare `kvplan`: the help, exit 0
    from kvplan.present.escape import error_line

    with signals.handled():
        try:
            code = _command_for(argv).main(args=argv, prog_name="kvplan", standalone_mode=False)
        except signals.Stopped as exc:  # SIGTERM, SIGINT, SIGHUP: everything cleaned up on the way
            _say(f"error: {exc.message}")
            sys.exit(exc.code)
        except KvplanError as exc:  # raised outside a command (option callbacks)
            stop = signals.stopped()
            if stop is not None:
                _say(f"error: {stop.message}")
                sys.exit(stop.code)
            typer.echo(error_line(exc), err=True)
            sys.exit(2)
        except Exception as exc:
            stop = signals.stopped()
            if stop is not None:  # what a stop left behind: a lock whose release it cut short
                _say(f"error: {stop.message}")  # ("cannot release un-acquired lock"), ...
                sys.exit(stop.code)
            if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):  # click usage errors
                moved = _moved(argv, exc)
                if moved:
                    option = getattr(exc, "option_name", "")  # set where _moved found one
                    typer.echo(f"error: {argv[0]} has no {option}: {moved}", err=True)
                    sys.exit(2)
                message = " ".join(exc.format_message().split())
                typer.echo(error_line(f"{message} (kvplan --help)"), err=True)
                sys.exit(2 if exc.exit_code in (None, 1, 2) else exc.exit_code)
            if exc.__class__.__name__ == "Abort":
                sys.exit(130)
            _internal_error(exc)
        sys.exit(code if isinstance(code, int) else 0)


def _say(line: str) -> None:
    """One line on standard error, if it is still there (a signal may follow a hang-up)."""
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _internal_error(exc: Exception) -> None:
    """Never a traceback for users; KVPLAN_DEBUG=1 shows it."""
    if os.environ.get("KVPLAN_DEBUG"):
        raise exc
    from kvplan.present.escape import terminal_text

    typer.echo(
        f"internal error: {exc.__class__.__name__}: {terminal_text(str(exc)[:300])} "
        "(KVPLAN_DEBUG=1 for details)",
        err=True,
    )
    sys.exit(1)
