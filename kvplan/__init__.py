"""kvplan: plan the KV cache of an LLM deployment from its config.json and a hardware profile."""

# Nothing is imported here: `python -m kvplan` and the `kvplan` script run this file before the
# entry point can turn a Ctrl-C into one line (kvplan/_entry.py), so it must take no time at all.
__version__ = "0.16.0"

__all__ = ["__version__", "KvplanError"]


def __getattr__(name: str):
    if name == "KvplanError":
        from kvplan.errors import KvplanError

        return KvplanError
    raise AttributeError(f"module 'kvplan' has no attribute {name!r}")
