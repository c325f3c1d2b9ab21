"""Writes prometheusrule.yaml from rules.yaml: the same groups, as a Prometheus Operator object.

One hand-kept file (rules.yaml, what `promtool` reads) and one made from it, so the two cannot
drift; tests/unit/monitoring/ fails when the committed prometheusrule.yaml is not what this
script makes. The groups are copied as text, indented under `spec:`, so the comments in them
stay. Standard library only: run it with any Python 3.

    python3 deploy/monitoring/generate.py            # writes prometheusrule.yaml
    python3 deploy/monitoring/generate.py --stdout   # prints it instead
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RULES = HERE / "rules.yaml"
TARGET = HERE / "prometheusrule.yaml"

HEADER = """\
# Generated from rules.yaml by deploy/monitoring/generate.py: edit rules.yaml, then run
#   python3 deploy/monitoring/generate.py
# Not part of deploy/kustomization.yaml (the PrometheusRule CRD may not exist in a cluster):
#   kubectl apply -f deploy/monitoring/prometheusrule.yaml
# Add the labels your Prometheus' ruleSelector asks for (docs/alerts.md).
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: libvirt-provider
  namespace: vm-api-system
  labels:
    app.kubernetes.io/name: libvirt-provider
spec:
"""


def render(rules_text: str) -> str:
    """The PrometheusRule for a rules file's text: its lines from `groups:` on (the file's own
    header comment is about the plain file), each indented by two spaces."""
    lines = rules_text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("groups:")), None)
    if start is None:
        raise ValueError("rules.yaml has no top-level 'groups:' line")
    body = [f"  {line}" if line else "" for line in lines[start:]]
    return HEADER + "\n".join(body) + "\n"


def main(argv: list[str]) -> int:
    text = render(RULES.read_text())
    if argv == ["--stdout"]:
        sys.stdout.write(text)
    elif not argv:
        TARGET.write_text(text)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
