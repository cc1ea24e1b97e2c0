#!/usr/bin/env python3
"""Lints and renders a Helm chart offline with Helm's own Go code (helm-python-sdk, Helm 4's library
behind a C ABI): the `helm lint` and `helm template` of a machine without the helm binary.

    helm-render.py CHART [--values FILE] [--name RELEASE] [--namespace NS]

Prints one JSON object: {"helm": <Helm version>, "lint": <lint report>, "manifests": {template path:
rendered text}} when the chart renders, or {"helm", "lint", "error": <Helm's message>} when a template
fails (a `required` or `fail` of the chart). Exits 0 then; 2 on bad usage or when the SDK is missing.
crates/kos-csi/tests/charts.rs and crates/kos-operator/tests/chart.rs run it with the Python of scripts/test's venv.
"""

import argparse
import json
import sys


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("chart")
    p.add_argument("--values", help="a values file, read with Helm's own YAML reader")
    p.add_argument("--name", default="kos")
    p.add_argument("--namespace", default="kube-system")
    a = p.parse_args()
    try:
        import helm_python as helm
    except ImportError as e:
        print(f"helm-render: helm-python-sdk is missing ({e}): pip install helm-python-sdk", file=sys.stderr)
        return 2
    helm.disable_logging()
    values = None
    if a.values:
        with open(a.values, encoding="utf-8") as f:
            values = helm.values_from_yaml(f.read())
    out = {
        "helm": helm.helm_sdk_version(),
        "lint": helm.lint(a.chart, values, strict=True, namespace=a.namespace),
    }
    with helm.Chart.load(a.chart) as chart:
        try:
            out["manifests"] = chart.render(values, name=a.name, namespace=a.namespace, is_install=True)
        except helm.HelmRenderError as e:
            out["error"] = str(e)
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
