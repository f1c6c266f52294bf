"""The anatomy of a model: layers, their caches and states, and the parameter count (kvplan.anatomy.model)."""
