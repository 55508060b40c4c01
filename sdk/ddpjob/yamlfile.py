"""YAML that users hand to the CLI (job specs, the config file), read safely and bounded.

`yaml.safe_load` shares the value of an alias instead of copying it, so a "billion laughs"
document (each level aliasing the previous one nine times) loads at once and explodes later,
when the values are walked or encoded. Here a document whose values, with every alias
expanded, number more than `MAX_VALUES` is refused before it is used.
"""

from __future__ import annotations

from typing import Any

import yaml

from ddpjob.errors import UserInputError

#: Values of one document, every alias expanded: far above any job spec or config file.
MAX_VALUES = 100_000


def _expanded(node: yaml.Node, sizes: dict[int, int]) -> int:
    """How many values `node` stands for once its aliases are expanded (each node counted once
    per path that reaches it; a recursive alias counts once)."""
    key = id(node)
    if key not in sizes:
        sizes[key] = 1  # a node reached again while it is being counted: a recursive alias
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            children = []
        sizes[key] = 1 + sum(_expanded(child, sizes) for child in children)
    return sizes[key]


def safe_load(text: str, where: str) -> Any:
    """`yaml.safe_load(text)`, or UserInputError naming `where` when the document's aliases
    expand past MAX_VALUES values. yaml.YAMLError for what is not YAML."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded(node, {}) > MAX_VALUES:
            raise UserInputError(
                f"{where}: its aliases (*name) expand to more than {MAX_VALUES:,} values; "
                f"write the values out or use fewer aliases")
        return loader.construct_document(node)
    finally:
        loader.dispose()
