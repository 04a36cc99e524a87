#!/usr/bin/env python3
"""check_examples.py CRD_DIR[,CRD_DIR...] EXAMPLE...: trainyard's CRDs are structural, and examples obey them.

Every CRD in the CRD_DIRs must be a structural schema as the API server demands (each node typed unless
it is int-or-string or keeps unknown fields, list-map keys required or defaulted); every object in
the examples whose kind one of them defines must validate against it strictly (unknown fields
fail, as kubectl --validate=strict does). Objects of other kinds are skipped. Exits 1 on any problem.
"""
import pathlib
import sys

import jsonschema
import yaml

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from check_chart import crd_schema  # noqa: E402  (same conversion the chart check uses)


def structural(node, path, problems):
    if not isinstance(node, dict):
        return
    typed = "type" in node or node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields")
    if not typed:
        problems.append(f"{path}: no type (a structural schema types every node)")
    if "properties" in node and "additionalProperties" in node:
        problems.append(f"{path}: properties and additionalProperties together")
    keys = node.get("x-kubernetes-list-map-keys") or []
    items = node.get("items") or {}
    for key in keys:
        prop = (items.get("properties") or {}).get(key)
        if prop is None or (key not in (items.get("required") or []) and "default" not in prop):
            problems.append(f"{path}: list-map key {key!r} must be a required (or defaulted) item field")
    for name, sub in (node.get("properties") or {}).items():
        structural(sub, f"{path}.{name}", problems)
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            structural(node[key], f"{path}[{key}]", problems)


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    problems, validators, checked = [], {}, 0
    crd_files = [p for d in argv[1].split(",") for p in pathlib.Path(d).glob("*.yaml")]
    for path in sorted(crd_files):
        crd = yaml.safe_load(path.read_text(encoding="utf-8"))
        spec = crd["spec"]
        for version in spec["versions"]:
            schema = version["schema"]["openAPIV3Schema"]
            structural(schema, f"{path.name} {version['name']}", problems)
            key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
            validators[key] = jsonschema.Draft4Validator(crd_schema(schema, root=True))
    for example in argv[2:]:
        for obj in yaml.safe_load_all(pathlib.Path(example).read_text(encoding="utf-8")):
            if not obj:
                continue
            key = (obj.get("apiVersion"), obj.get("kind"))
            if key not in validators:
                continue
            checked += 1
            where = f"{example} {obj['kind']}/{obj.get('metadata', {}).get('name')}"
            for e in validators[key].iter_errors(obj):
                problems.append(f"{where}: {'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}")
    if checked == 0:
        problems.append("no example object matched a CRD")
    print(*problems or [f"OK: {len(validators)} CRDs structural, {checked} example objects valid"], sep="\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
