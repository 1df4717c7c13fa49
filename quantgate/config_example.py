"""`quantgate config --example`: a commented YAML file generated from the schema itself.

Every field appears with its description as a comment and its default as the value, so the
example can never drift from the schema; parsing it gives back exactly the defaults. A field left unset whose
default is null shows null, even where another setting decides its value (the task, evaluate's latency batch).
"""

from __future__ import annotations

import yaml
from pydantic import BaseModel

from quantgate.config import PipelineConfig

HEADER = """\
# quantgate release configuration: every field, with its default.
#   quantgate config --example > release.yaml
#   quantgate run --config release.yaml
# The same keys work as `quantgate run --set section.field=value` and as the `config` parameter
# of the Prefect deployments (prefect deployment run 'release/on-demand' --param 'config={...}').
# Unknown keys are errors.

"""


def _is_section(value) -> bool:
    return isinstance(value, BaseModel)


def _scalar(value) -> str:
    """One YAML flow value (lists in brackets), as the schema would read it back."""
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10_000).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def _lines(model: BaseModel, indent: int) -> list[str]:
    pad = "  " * indent
    lines = []
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        if field.default is None and name not in model.model_fields_set:  # left to another setting: shown as null
            value = None  # (evaluate.latency_batch_size, which the task decides)
        if field.description:
            lines.append(f"{pad}# {field.description}")
        if _is_section(value):
            lines.append(f"{pad}{name}:")
            lines.extend(_lines(value, indent + 1))
        else:
            lines.append(f"{pad}{name}: {_scalar(_plain(value))}")
    return lines


def _plain(value):
    """Tuples become lists, so YAML writes them as sequences; models in a list become mappings of their set fields."""
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    return value


def example_yaml(config: PipelineConfig | None = None) -> str:
    """A commented YAML rendering of `config` (the defaults when None)."""
    return HEADER + "\n".join(_lines(config or PipelineConfig(), 0)) + "\n"
