#!/usr/bin/env python3
"""Installs, upgrades and uninstalls a Helm release on a real API server with the Helm v4 SDK
(helm-python-sdk), for the end-to-end suite. The cluster is the one $KUBECONFIG names.

    helm_release.py install   CHART RELEASE NAMESPACE [VALUES.json]
    helm_release.py upgrade   CHART RELEASE NAMESPACE [VALUES.json]
    helm_release.py uninstall RELEASE NAMESPACE

Prints one JSON object: {"status", "version" (the revision), "kinds": {"Kind": count}, "notes"} on
success, or
exits 1 with the SDK's error on one line of standard error.
"""
import json
import os
import sys

import helm_python as helm
import yaml


def kinds(manifest):
    counts = {}
    for doc in yaml.safe_load_all(manifest or ""):
        if isinstance(doc, dict) and doc.get("kind"):
            counts[doc["kind"]] = counts.get(doc["kind"], 0) + 1
    return counts


def main(argv):
    if len(argv) < 2 or argv[1] not in ("install", "upgrade", "uninstall"):
        print(__doc__, file=sys.stderr)
        return 2
    action = argv[1]
    cfg = helm.Config(kubeconfig_path=os.environ["KUBECONFIG"], namespace=argv[-1] if action == "uninstall" else argv[4])
    try:
        if action == "uninstall":
            release, namespace = argv[2], argv[3]
            cfg.uninstall(release, timeout=120)
            print(json.dumps({"status": "uninstalled", "release": release, "namespace": namespace}))
            return 0
        chart, release, namespace = argv[2], argv[3], argv[4]
        values = json.load(open(argv[5])) if len(argv) > 5 else None
        if action == "install":
            rel = cfg.install(chart, release, values, namespace=namespace, create_namespace=True, timeout=120)
        else:
            rel = cfg.upgrade(chart, release, values, namespace=namespace, timeout=120)
    except helm.HelmError as e:
        print(f"helm {action} failed: {' '.join(str(e).split())}", file=sys.stderr)
        return 1
    print(json.dumps({
        "status": rel.get("status"),
        "version": rel.get("revision"),
        "kinds": kinds(rel.get("manifest")),
        "notes": rel.get("notes") or "",
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
