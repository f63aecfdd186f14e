"""YAML documents, loaded by libyaml (``CSafeLoader``) where PyYAML was built with it: several
times faster than PyYAML's pure-Python loader on large manifests. ``bounded_load`` bounds
what is read and walked; this records duplicate keys and keeps timestamps as strings.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import yaml

from ipvsproxy.bounded_load import MAX_DEPTH, Documents, LoadError

_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"
_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):  # type: ignore[misc,valid-type]
    """A safe loader that records duplicate keys and reads timestamps as the strings they are.

    Kubernetes decodes YAML into JSON types, so ``creationTimestamp`` stays a string.
    """

    yaml_implicit_resolvers: ClassVar[dict[Any, list[tuple[str, Any]]]] = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP_TAG]
        for first, resolvers in _BaseLoader.yaml_implicit_resolvers.items()
    }

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicate_keys: dict[int, list[str]] = {}

    def construct_recorded_mapping(self, node: yaml.MappingNode) -> Iterator[dict[Any, Any]]:
        data: dict[Any, Any] = {}
        yield data
        seen: set[str] = set()
        repeated: list[str] = []
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value != "<<":
                if key_node.value in seen:
                    repeated.append(key_node.value)
                seen.add(key_node.value)
        data.update(self.construct_mapping(node))
        if repeated:
            self.duplicate_keys[id(data)] = repeated


_Loader.add_constructor("tag:yaml.org,2002:map", _Loader.construct_recorded_mapping)


def _mark(error: yaml.YAMLError, name: str = "problem_mark") -> str:
    mark = getattr(error, name, None)
    return f" at line {mark.line + 1}" if mark is not None else ""


def yaml_error_line(error: yaml.YAMLError) -> str:
    """A YAML error as one line that names where in the text it is, and where it began."""
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    context = getattr(error, "context", None)
    began = f" ({context}{_mark(error, 'context_mark')})" if context else ""
    return f"not valid YAML{_mark(error)}: {problem}{began}"


def load_yaml(text: str) -> Documents:
    """Every non-empty document of a YAML text, with its duplicate keys; LoadError (one line)."""
    loader = _Loader(text)
    documents: list[Any] = []
    try:
        while loader.check_data():
            document = loader.get_data()
            if document is not None:
                documents.append(document)
    except yaml.YAMLError as error:
        if "maximum nesting depth" in str(error):
            raise LoadError(f"nested deeper than {MAX_DEPTH} levels{_mark(error)}") from None
        raise LoadError(yaml_error_line(error)) from None
    except RecursionError:  # the pure-Python loader recurses where libyaml does not
        raise LoadError(f"nested deeper than {MAX_DEPTH} levels") from None
    finally:
        loader.dispose()
    return Documents(documents, loader.duplicate_keys)
