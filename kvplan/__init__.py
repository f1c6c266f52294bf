"""kvplan: plan the KV cache of an LLM deployment from its config.json and a hardware profile."""

__version__ = "0.1.0"

from kvplan.errors import KvplanError  # noqa: E402

__all__ = ["__version__", "KvplanError"]
