#!/usr/bin/env python3
"""Offline check of a Helm chart: lint, render, and validate every object it would install.

Usage: check_chart.py [--rbac-expect FILE] [--manifest OUT] CHART [K8S_VERSION] [VALUES...]

  K8S_VERSION  e.g. 1.34 or v1.34.0 (default 1.34.0, the chart's minimum); 1.25-1.37 are known.
  VALUES       values files (merged in order, like `helm -f`) or KEY=VALUE (like `helm --set`).

Steps, all in-process and without a cluster (Helm v4 through helm-python-sdk):
  1. helm lint --strict for that Kubernetes version, and a client-side install dry-run, which is
     the only place Helm enforces Chart.yaml kubeVersion;
  2. render the templates, add crds/ (render() leaves it out), parse every YAML document;
  3. schema-validate each object: custom resources against the CRDs found in the chart (converted
     from OpenAPI v3 to strict JSON Schema), ServiceMonitors against scripts/schemas/, everything
     else with kubernetes-validate in strict mode (an unknown kind is a problem, not a warning);
  4. audit RBAC (no `*`, secrets only `get` and `create`, no escalate/bind/impersonate, no aggregation, bindings only to
     roles the chart defines) and, with --rbac-expect, compare the grants with a reviewed list;
  5. audit pod hardening (non-root, read-only root fs, no privilege escalation, drop ALL,
     seccomp) and the references between objects (Service -> pods and ports, ServiceMonitor ->
     Service, volumes -> ConfigMaps, probes -> ports).
Prints every problem, or one OK line; exits 1 on any problem, 2 on a usage error.
"""

import argparse
import json
import os
import re
import sys
from pathlib import Path

import helm_python as helm
import jsonschema
import kubernetes_validate as kv
from kubernetes_validate.utils import VersionNotSupportedError
import yaml

RELEASE = "ci"
NAMESPACE = "trainyard-ci"
SCHEMAS = Path(__file__).resolve().parent / "schemas"
# Kinds checked against a hand-written schema because kubernetes-validate does not know them and
# the chart does not ship their CRD. A CRD found in the chart takes precedence.
HAND_SCHEMAS = {("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor-v1.json"}
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}
# Verbs that let the holder grant itself more than the rules say.
ESCALATING_VERBS = {"escalate", "bind", "impersonate"}
BROAD_BUILTIN_ROLES = {"cluster-admin", "admin", "edit"}


def parse_version(text):
    m = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        return None
    major, minor, patch = m.group(1), m.group(2), m.group(3) or "0"
    return f"{major}.{minor}.{patch}"


def merge(base, over):
    """Deep merge like Helm's -f/--set layering: maps merge key by key, anything else replaces."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def load_values(args, problems):
    values = {}
    for arg in args:
        if os.path.isfile(arg):
            try:
                with open(arg, encoding="utf-8") as f:
                    doc = yaml.safe_load(f)
            except (OSError, yaml.YAMLError) as e:
                problems.append(f"values {arg}: {e}")
                continue
            if doc is None:
                continue
            if not isinstance(doc, dict):
                problems.append(f"values {arg}: the top level must be a map")
                continue
        elif "=" in arg:
            try:
                doc = helm.parse_set_string(arg)
            except helm.HelmError as e:
                problems.append(f"values {arg}: {e}")
                continue
        else:
            problems.append(f"values {arg}: neither a file nor KEY=VALUE")
            continue
        values = merge(values, doc)
    return values


def crd_schema(node, structural=True, root=False):
    """One node of a CRD's openAPIV3Schema (an OpenAPI 3.0 subset) as draft-4 JSON Schema.

    Objects with declared fields reject undeclared ones, as `kubectl --validate=strict` does; the
    API server would silently prune them instead. Branches of allOf/anyOf/oneOf/not only add
    constraints to the structural schema around them, so they never get that closing rule.
    """
    out, resource = {}, root or node.get("x-kubernetes-embedded-resource")
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key == "nullable":
            continue
        if key in ("properties", "patternProperties"):
            # A resource's metadata is always a full ObjectMeta; a CRD may only narrow name.
            out[key] = {name: crd_schema(sub, structural and not (resource and name == "metadata"))
                        for name, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = crd_schema(value, structural)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [crd_schema(sub, False) for sub in value]
        elif key == "not":
            out[key] = crd_schema(value, False)
        else:
            out[key] = value
    if node.get("x-kubernetes-int-or-string") and "type" not in out:
        out["type"] = ["integer", "string"]
    if node.get("nullable"):
        if "type" in out:
            out["type"] = (out["type"] if isinstance(out["type"], list) else [out["type"]]) + ["null"]
        if "enum" in out and None not in out["enum"]:
            out["enum"] = out["enum"] + [None]
    closed = structural and not node.get("x-kubernetes-preserve-unknown-fields")
    if closed and "additionalProperties" not in out and (out.get("type") == "object" or "properties" in out):
        out["additionalProperties"] = False
    if resource:
        props = out.setdefault("properties", {})
        props.setdefault("apiVersion", {"type": "string"})
        props.setdefault("kind", {"type": "string"})
        props.setdefault("metadata", {"type": "object"})
    return out


def namespace(obj):
    """Where a namespaced object lands: Helm installs objects without one into the release's."""
    return (obj.get("metadata") or {}).get("namespace") or NAMESPACE


def describe(source, obj):
    meta = obj.get("metadata") or {}
    return f"{source} {obj.get('kind')}/{meta.get('name')}"


def err_path(error):
    return ".".join(str(p) for p in error.absolute_path) or "(top)"


def helm_checks(chart, values, version, problems):
    """Lint, and the install dry-run that enforces kubeVersion. Returns the rendered files."""
    try:
        lint = helm.lint(chart, values or None, strict=True, kube_version="v" + version)
    except helm.HelmError as e:
        problems.append(f"lint: {type(e).__name__}: {e}")
    else:
        sev = {2: "warning", 3: "error"}
        problems += [f"lint {m['path']}: {sev.get(m['severity'], 'error')}: {m['error']}"
                     for m in lint.get("messages", []) if m.get("severity", 3) >= 2]
    files = {}
    try:
        with helm.Chart.load(chart) as c:
            files.update({f["filename"]: f["data"] for f in c.crds})
            files.update(c.render(values or None, name=RELEASE, namespace=NAMESPACE))
            # Config.install() offers no kube_version; the native entry point does (pinned SDK
            # 0.2.2). Only this path checks Chart.yaml kubeVersion; the manifest is not used.
            opts = {"dry_run": "client", "kube_version": "v" + version, "namespace": NAMESPACE}
            with helm.Config(storage_driver="memory", namespace=NAMESPACE) as cfg:
                helm._native.call_string(
                    "helm_install", cfg._raw(), helm._native.HANDLE(0), c._raw(), None, RELEASE,
                    json.dumps(values) if values else None, json.dumps(opts))
    except helm.HelmError as e:
        problems.append(f"helm: {type(e).__name__}: {e}")
    return files


def parse_objects(files, problems):
    objects, seen = [], {}
    for name in sorted(files):
        if not name.endswith((".yaml", ".yml", ".json")):
            continue
        try:
            docs = list(yaml.safe_load_all(files[name]))
        except yaml.YAMLError as e:
            problems.append(f"{name}: invalid YAML: {e}")
            continue
        for doc in docs:
            if doc is None:
                continue
            if not isinstance(doc, dict) or not doc.get("apiVersion") or not doc.get("kind") \
                    or not (doc.get("metadata") or {}).get("name"):
                problems.append(f"{name}: a document without apiVersion, kind and metadata.name")
                continue
            meta = doc["metadata"]
            key = (doc["apiVersion"].split("/")[0], doc["kind"], meta.get("namespace"), meta["name"])
            if key in seen:
                problems.append(f"{describe(name, doc)}: defined twice (also in {seen[key]})")
            seen[key] = name
            objects.append((name, doc))
    return objects


def validate_schemas(objects, version, problems):
    crds = {}
    for source, obj in objects:
        if obj["kind"] != "CustomResourceDefinition" or not isinstance(obj.get("spec"), dict):
            continue
        spec = obj["spec"]
        for v in spec.get("versions") or []:
            schema = (v.get("schema") or {}).get("openAPIV3Schema")
            key = (f"{spec.get('group')}/{v.get('name')}", (spec.get("names") or {}).get("kind"))
            if schema is not None:
                crds[key] = (v.get("served", False), jsonschema.Draft4Validator(crd_schema(schema, root=True)))
    try:  # once, rather than the same complaint for every object
        kv.validate({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "probe"}}, version, strict=True)
    except VersionNotSupportedError as e:
        problems.append(f"kubernetes-validate: {getattr(e, 'message', None) or e!r}")
        return
    hand = {key: jsonschema.Draft7Validator(json.loads((SCHEMAS / file).read_text(encoding="utf-8")))
            for key, file in HAND_SCHEMAS.items()}
    for source, obj in objects:
        key, where = (obj["apiVersion"], obj["kind"]), describe(source, obj)
        if key in crds:
            served, validator = crds[key]
            if not served:
                problems.append(f"{where}: version {obj['apiVersion']} is not served by its CRD")
            errors = validator.iter_errors(obj)
        elif key in hand:
            errors = hand[key].iter_errors(obj)
        else:
            try:
                kv.validate(obj, version, strict=True)
            except kv.ValidationError as e:
                problems.append(f"{where}: {'.'.join(map(str, e.path)) or '(top)'}: {e.message}")
            except Exception as e:  # SchemaNotFoundError and friends: an unknown kind must not pass
                problems.append(f"{where}: {type(e).__name__}: {getattr(e, 'message', e)}")
            continue
        problems += [f"{where}: {err_path(e)}: {e.message}"
                     for e in sorted(errors, key=lambda e: list(map(str, e.absolute_path)))]


def grants(objects):
    """{Role kind: {apiGroup: {resource: {verbs}}}} over every rule the chart renders."""
    out = {}
    for _, obj in objects:
        if obj["kind"] in ("Role", "ClusterRole"):
            for rule in obj.get("rules") or []:
                for group in rule.get("apiGroups") or []:
                    for res in rule.get("resources") or []:
                        kind = out.setdefault(obj["kind"], {})
                        kind.setdefault(group or "core", {}).setdefault(res, set()).update(rule.get("verbs") or [])
    return out


def audit_rbac(objects, expect_file, problems):
    roles = {(o["kind"], namespace(o) if o["kind"] == "Role" else None, o["metadata"]["name"]) for _, o in objects}
    for source, obj in objects:
        where, kind = describe(source, obj), obj["kind"]
        if kind in ("Role", "ClusterRole"):
            if obj.get("aggregationRule"):
                problems.append(f"RBAC {where}: aggregationRule pulls in rules the chart does not show")
            for i, rule in enumerate(obj.get("rules") or []):
                for field in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
                    if any("*" in str(x) for x in rule.get(field) or []):
                        problems.append(f"RBAC {where}: rules.{i}.{field} has a wildcard: {rule[field]}")
                # Secrets: only making one (an MPI gang's SSH key) and reading one by name; never
                # listing or watching them (every Secret's content), changing or deleting them.
                if any(str(r).split("/")[0] == "secrets" for r in rule.get("resources") or []):
                    broad = sorted(set(rule.get("verbs") or []) - {"get", "create"})
                    if broad:
                        problems.append(f"RBAC {where}: rules.{i} grants {', '.join(broad)} on secrets")
                bad = sorted(ESCALATING_VERBS.intersection(rule.get("verbs") or []))
                if bad:
                    problems.append(f"RBAC {where}: rules.{i} grants {', '.join(bad)}")
        elif kind in ("RoleBinding", "ClusterRoleBinding"):
            ref = obj.get("roleRef") or {}
            ns = namespace(obj) if ref.get("kind") == "Role" else None
            if ref.get("name") in BROAD_BUILTIN_ROLES:
                problems.append(f"RBAC {where}: binds the built-in {ref.get('kind')} {ref.get('name')}")
            elif (ref.get("kind"), ns, ref.get("name")) not in roles:
                problems.append(f"RBAC {where}: binds {ref.get('kind')}/{ref.get('name')}, which the chart "
                                "does not define (its rules cannot be audited)")
    if expect_file:
        with open(expect_file, encoding="utf-8") as f:
            expected = yaml.safe_load(f) or {}
        actual = grants(objects)
        for kind in sorted(set(expected) | set(actual)):
            want, have = expected.get(kind) or {}, actual.get(kind) or {}
            for group in sorted(set(want) | set(have)):
                w, h = want.get(group) or {}, have.get(group) or {}
                for res in sorted(set(w) | set(h)):
                    listed, granted = set(w.get(res) or ()), h.get(res, set())
                    extra, missing = granted - listed, listed - granted
                    if extra:
                        problems.append(f"RBAC {kind} {group} {res}: grants {sorted(extra)} beyond {expect_file}")
                    if missing:
                        problems.append(f"RBAC {kind} {group} {res}: lacks {sorted(missing)} listed in {expect_file}")


def pod_template(obj):
    """The pod template (metadata + spec) of a workload, the pod itself, or None for other kinds."""
    spec = obj.get("spec") or {}
    if obj["kind"] == "Pod":
        return obj
    if obj["kind"] == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    elif obj["kind"] not in WORKLOAD_KINDS:
        return None
    return spec.get("template") or {}


def pod_spec(obj):
    template = pod_template(obj)
    return None if template is None else template.get("spec") or {}


def audit_pods(objects, problems):
    for source, obj in objects:
        spec = pod_spec(obj)
        if spec is None:
            continue
        where, pod_sc = describe(source, obj), spec.get("securityContext") or {}
        for flag in ("hostNetwork", "hostPID", "hostIPC"):
            if spec.get(flag):
                problems.append(f"pod {where}: {flag} is set")
        for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
            sc, name = c.get("securityContext") or {}, f"{where} container {c.get('name')}"
            inherited = {**pod_sc, **sc}  # container fields override the pod's
            if inherited.get("runAsNonRoot") is not True or inherited.get("runAsUser") == 0:
                problems.append(f"pod {name}: must run as non-root (runAsNonRoot: true, runAsUser not 0)")
            if sc.get("readOnlyRootFilesystem") is not True:
                problems.append(f"pod {name}: readOnlyRootFilesystem must be true")
            if sc.get("allowPrivilegeEscalation") is not False:
                problems.append(f"pod {name}: allowPrivilegeEscalation must be false")
            if sc.get("privileged"):
                problems.append(f"pod {name}: privileged")
            if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
                problems.append(f"pod {name}: capabilities.drop must contain ALL")
            if (sc.get("capabilities") or {}).get("add"):
                problems.append(f"pod {name}: adds capabilities {sc['capabilities']['add']}")
            if (inherited.get("seccompProfile") or {}).get("type") not in ("RuntimeDefault", "Localhost"):
                problems.append(f"pod {name}: seccompProfile must be RuntimeDefault (or Localhost)")


def seconds(duration):
    units = {"y": 31536000, "w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 0.001}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)(ms|y|w|d|h|m|s)", duration or ""))


def audit_references(objects, problems):
    by_kind = {}
    for source, obj in objects:
        by_kind.setdefault(obj["kind"], []).append((source, obj))
    pods = [(s, o, pod_spec(o)) for s, o in objects if pod_spec(o) is not None]
    configmaps = {(namespace(o), o["metadata"]["name"]) for _, o in by_kind.get("ConfigMap", [])}
    for source, obj, spec in pods:
        where, ns = describe(source, obj), namespace(obj)
        for vol in spec.get("volumes") or []:
            cm = vol.get("configMap")
            if cm and not cm.get("optional") and (ns, cm.get("name")) not in configmaps:
                problems.append(f"refs {where}: volume {vol.get('name')} needs ConfigMap {cm.get('name')}, "
                                "which the chart does not render")
        for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
            names = {p.get("name") for p in c.get("ports") or []}
            for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                port = ((c.get(probe) or {}).get("httpGet") or {}).get("port")
                if isinstance(port, str) and port not in names:
                    problems.append(f"refs {where} container {c.get('name')}: {probe} uses port {port}, not declared")
    services = by_kind.get("Service", [])
    for source, svc in services:
        where, sel = describe(source, svc), (svc.get("spec") or {}).get("selector") or {}
        if not sel:
            continue
        targets = [spec for _, o, spec in pods if namespace(o) == namespace(svc)
                   and sel.items() <= ((pod_template(o).get("metadata") or {}).get("labels") or {}).items()]
        if not targets:
            problems.append(f"refs {where}: its selector {sel} matches no pods of the chart")
            continue
        ports = {p.get("name") for spec in targets for c in spec.get("containers") or [] for p in c.get("ports") or []}
        for p in (svc.get("spec") or {}).get("ports") or []:
            if isinstance(p.get("targetPort"), str) and p["targetPort"] not in ports:
                problems.append(f"refs {where}: targetPort {p['targetPort']} is no container port of the selected pods")
    for source, sm in by_kind.get("ServiceMonitor", []):
        where, spec = describe(source, sm), sm.get("spec") or {}
        nss = spec.get("namespaceSelector") or {}
        allowed = None if nss.get("any") else set(nss.get("matchNames") or [namespace(sm)])
        match = ((spec.get("selector") or {}).get("matchLabels") or {}).items()
        hits = [s for _, s in services if match <= (s["metadata"].get("labels") or {}).items()
                and (allowed is None or namespace(s) in allowed)]
        if not hits:
            problems.append(f"refs {where}: selects no Service of the chart (labels and namespaces)")
        ports = {p.get("name") for s in hits for p in (s.get("spec") or {}).get("ports") or []}
        for i, ep in enumerate(spec.get("endpoints") or []):
            if hits and ep.get("port") is not None and ep["port"] not in ports:
                problems.append(f"refs {where}: endpoints.{i}.port {ep['port']} is no port of the selected Service")
            interval, timeout = ep.get("interval"), ep.get("scrapeTimeout")
            if interval and timeout and seconds(timeout) > seconds(interval):
                problems.append(f"refs {where}: endpoints.{i}.scrapeTimeout exceeds the interval")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rbac-expect", metavar="FILE", help="YAML {Role kind: {apiGroup|core: {resource: [verbs]}}}")
    ap.add_argument("--manifest", metavar="OUT", help="also write the rendered objects here")
    ap.add_argument("chart")
    ap.add_argument("rest", nargs="*", metavar="[K8S_VERSION] [VALUES...]")
    args = ap.parse_args(argv)
    rest, version = list(args.rest), "1.34.0"
    if rest and parse_version(rest[0]):
        version = parse_version(rest.pop(0))
    if not os.path.isfile(os.path.join(args.chart, "Chart.yaml")):
        print(f"{args.chart}: no Chart.yaml", file=sys.stderr)
        return 2
    problems = []
    values = load_values(rest, problems)
    files = helm_checks(args.chart, values, version, problems)
    objects = parse_objects(files, problems)
    validate_schemas(objects, version, problems)
    audit_rbac(objects, args.rbac_expect, problems)
    audit_pods(objects, problems)
    audit_references(objects, problems)
    if args.manifest:
        with open(args.manifest, "w", encoding="utf-8") as f:
            for source, obj in objects:
                f.write(f"---\n# Source: {source}\n{yaml.safe_dump(obj, sort_keys=False)}")
    if problems:
        print(*(p.strip() for p in problems), sep="\n")
        print(f"FAIL: {len(problems)} problem(s) in {args.chart} for Kubernetes {version}")
        return 1
    kinds = {}
    for _, obj in objects:
        kinds[obj["kind"]] = kinds.get(obj["kind"], 0) + 1
    summary = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
    print(f"OK: {len(objects)} objects valid for Kubernetes {version} ({summary})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
