"""Parses Prometheus text with the reference parser (prometheus_client), as a scraper would.

Spec: {"text": str}
Answer: {"families": [{"name": str, "type": str, "help": str,
                       "samples": [{"name": str, "labels": {str: str}, "value": float}]}]}
A text the parser rejects makes the script fail with the parser's error.
"""

from __future__ import annotations

from typing import Any

from interop_common import main
from prometheus_client.parser import text_string_to_metric_families


async def parse(spec: dict[str, Any]) -> dict[str, Any]:
    families = []
    for family in text_string_to_metric_families(spec["text"]):
        families.append(
            {
                "name": family.name,
                "type": family.type,
                "help": family.documentation,
                "samples": [
                    {"name": s.name, "labels": dict(s.labels), "value": s.value}
                    for s in family.samples
                ],
            }
        )
    return {"families": families}


if __name__ == "__main__":
    main(parse)
