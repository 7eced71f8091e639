"""Reads a Prometheus text exposition (format 0.0.4) on stdin, parses it with the official
client's parser, and prints {family: {"type", "help", "samples": [{"name", "labels", "value"}]}}
as JSON. A text the parser refuses makes it exit non-zero with the parser's error.
Run through scripts/prometheus_parse.sh, which installs the pinned parser."""

import json
import sys

from prometheus_client.parser import text_string_to_metric_families


def main() -> None:
    families = {}
    for family in text_string_to_metric_families(sys.stdin.read()):
        if family.name in families:
            sys.exit(f"family {family.name} appears twice")
        families[family.name] = {
            "type": family.type,
            "help": family.documentation,
            "samples": [
                {"name": sample.name, "labels": sample.labels, "value": sample.value}
                for sample in family.samples
            ],
        }
    json.dump(families, sys.stdout, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
