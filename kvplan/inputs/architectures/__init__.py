"""config.json -> ModelSpec from structure (build), with per-family defaults (families), the
readers of non-uniform layer layouts (layouts), recurrent mixers (mixers), parameter counts
(params) and the structural-field report (structure)."""

from kvplan.inputs.architectures.build import build_model, text_config

__all__ = ["build_model", "text_config"]
