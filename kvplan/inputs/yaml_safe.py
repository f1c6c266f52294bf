"""A strict YAML loader for hardware profiles: plain data only. Anchors and aliases are refused
(an alias bomb expands to gigabytes), nesting is bounded, a key may appear once per mapping (two
bandwidths must not silently resolve to the last), and an integer too long to be a number is an
error, not a crash."""

from __future__ import annotations

import yaml

from kvplan.errors import KvplanError


def _loader_class(source: str, max_depth: int):
    class StrictLoader(yaml.SafeLoader):
        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark
                raise KvplanError(
                    f"{source}: YAML aliases are not allowed in a profile (line {mark.line + 1})"
                )
            event = self.peek_event()
            if getattr(event, "anchor", None):
                raise KvplanError(
                    f"{source}: YAML anchors are not allowed in a profile "
                    f"(line {event.start_mark.line + 1})"
                )
            self._depth = getattr(self, "_depth", 0) + 1
            try:
                if self._depth > max_depth:
                    raise KvplanError(f"{source}: YAML nested deeper than {max_depth} levels")
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    duplicate = key in seen
                except TypeError:
                    raise KvplanError(f"{source}: a mapping key is not plain text") from None
                if duplicate:
                    raise KvplanError(
                        f"{source}: key {str(key)[:40]!r} appears twice "
                        f"(line {key_node.start_mark.line + 1})"
                    )
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

        def construct_yaml_int(self, node):
            if len(str(node.value)) > 40:
                raise KvplanError(
                    f"{source}: a number of {len(node.value)} digits is not plausible"
                )
            return super().construct_yaml_int(node)

    StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)
    StrictLoader.add_constructor("tag:yaml.org,2002:map", StrictLoader.construct_yaml_map)
    return StrictLoader


def load_strict_yaml(text: str, source: str, max_depth: int = 8) -> object:
    loader = _loader_class(source, max_depth)
    try:
        return yaml.load(text, Loader=loader)  # noqa: S506 - a SafeLoader subclass
    except KvplanError:
        raise
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise KvplanError(f"{source}: invalid YAML{where}") from None
    except (RecursionError, ValueError, OverflowError, MemoryError):
        raise KvplanError(f"{source}: YAML too large or deeply nested to be a profile") from None
