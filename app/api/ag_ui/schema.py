"""The AG-UI request body in our OpenAPI document, from the protocol's own model.

`RunAgentInput`'s JSON Schema (built by pydantic from `ag_ui.core`) goes into the components
under `AgUi…` names: the protocol has its own `TextPart`, `Tool`, … which must neither take
the place of ours nor rename them. Clients generated from our document then type the AG-UI
body as the protocol defines it, and fuzzers draw real RunAgentInputs.
"""

from __future__ import annotations

from typing import Any

from ag_ui.core import RunAgentInput

PREFIX = "AgUi"
INPUT_SCHEMA = f"{PREFIX}RunAgentInput"
PATH_PREFIX = "/v1/ag-ui"


def ag_ui_components() -> dict[str, dict[str, Any]]:
    """`RunAgentInput` and every model it uses, named `AgUi<model>`."""
    schema = RunAgentInput.model_json_schema(
        by_alias=True, ref_template=f"#/components/schemas/{PREFIX}{{model}}"
    )
    defs = schema.pop("$defs", {})
    components = {f"{PREFIX}{name}": body for name, body in defs.items()}
    components[INPUT_SCHEMA] = schema
    return components


def describe_ag_ui(document: dict[str, Any]) -> None:
    """Add the components and point the AG-UI routes' request bodies at them."""
    document["components"]["schemas"].update(ag_ui_components())
    for path, item in document["paths"].items():
        if not path.startswith(PATH_PREFIX):
            continue
        for operation in item.values():
            media = operation["requestBody"]["content"]["application/json"]
            if "$ref" in media["schema"]:
                continue  # a body of its own (connect, stop)
            media["schema"] = {"$ref": f"#/components/schemas/{INPUT_SCHEMA}"}
