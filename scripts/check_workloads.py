#!/usr/bin/env python3
"""Checks rendered workload files (the bridges goldens) against upstream schemas.

Usage: "$(bash scripts/python-env.sh)" scripts/check_workloads.py GOLDEN_DIR [GOLDEN_DIR ...]

Every *.jobset.yaml document must
  - be apiVersion jobset.x-k8s.io/v1alpha2, kind JobSet;
  - survive a strict round trip through the upstream JobSet v1alpha2 OpenAPI model that Kubeflow
    Trainer publishes (kubeflow_trainer_api.models.JobsetV1alpha2JobSet): from_dict then to_dict
    must give the input back; a key that disappears is a field the upstream schema does not know;
  - have every spec.replicatedJobs[].template valid as a strict batch/v1 Job (kubernetes-validate).
Every *.lws.yaml document must
  - be apiVersion leaderworkerset.x-k8s.io/v1, kind LeaderWorkerSet, and match the outer shape of
    the LeaderWorkerSet v1 spec (required fields, known fields only, types and enums), which is
    written out below because no pinned package ships the LWS schema;
  - have its leader and worker templates valid as strict v1 PodTemplates (kubernetes-validate).
Every *.job.yaml document (a `trainyard sweep --k8s-indexed-job` golden) must
  - be a strict batch/v1 Job (kubernetes-validate) or a ConfigMap;
  - for an Indexed Job, carry what the API server would also demand: completions set,
    restartPolicy Never with backoffLimitPerIndex, every volumeMount naming a volume, and every
    ConfigMap item a key of the ConfigMap of that name in the same file.
A PodGroup beside a JobSet (a binder's gang object in a `trainyard render --binder` golden) must
  - match its binder's published spec (scripts/podgroup_schemas.py: scheduler-plugins, Volcano, KAI);
  - be named by every gang pod template of the file's JobSets (the label or annotation of its binder),
    with minMember equal to those templates' pods.
Both kinds have their metadata checked strictly as Kubernetes ObjectMeta. A ConfigMap or Secret
beside them (an MPI hostfile, Flux's scripts and certificate in a `trainyard render` golden) must be
a strict v1 ConfigMap or Secret.
Prints "OK: N objects", or one line per problem (file: path: message) and exits 1.
"""

import sys
from pathlib import Path

import jsonschema
import kubernetes_validate
import yaml
from kubeflow_trainer_api.models import JobsetV1alpha2JobSet
from podgroup_schemas import BY_API_VERSION as POD_GROUP_SCHEMAS, POD_LINKS

K8S_VERSION = "1.34"
JOBSET_API = ("jobset.x-k8s.io/v1alpha2", "JobSet")
JOB_API = ("batch/v1", "Job")
LWS_API = ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")

INT_OR_STRING = {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": r"^[0-9]+%?$"}]}
INT32 = {"type": "integer", "minimum": 0, "maximum": 2**31 - 1}

# The LeaderWorkerSet v1 outer shape (leaderworkerset.x-k8s.io, LWS v0.10). Pod templates are only
# required to be objects here; kubernetes-validate checks their content.
LWS_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string", "minLength": 1}},
        },
        "status": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["leaderWorkerTemplate"],
            "additionalProperties": False,
            "properties": {
                "replicas": {"type": "integer", "minimum": 0, "maximum": 1000000},
                "startupPolicy": {"enum": ["LeaderCreated", "LeaderReady"]},
                "networkConfig": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"subdomainPolicy": {"enum": ["Shared", "UniquePerReplica"]}},
                },
                "rolloutStrategy": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "type": {"enum": ["RollingUpdate"]},
                        "rollingUpdateConfiguration": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "partition": INT32,
                                "maxUnavailable": INT_OR_STRING,
                                "maxSurge": INT_OR_STRING,
                            },
                        },
                    },
                },
                "leaderWorkerTemplate": {
                    "type": "object",
                    "required": ["workerTemplate"],
                    "additionalProperties": False,
                    "properties": {
                        "leaderTemplate": {"type": "object"},
                        "workerTemplate": {"type": "object"},
                        "size": {"type": "integer", "minimum": 1, "maximum": 2**31 - 1},
                        "restartPolicy": {
                            "enum": ["RecreateGroupOnPodRestart", "RecreateGroupAfterStart", "None", "Default"]
                        },
                        "subGroupPolicy": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "subGroupPolicyType": {"enum": ["LeaderWorker", "LeaderExcluded"]},
                                "subGroupSize": {"type": "integer", "minimum": 1},
                            },
                        },
                        "volumeClaimTemplates": {"type": "array", "items": {"type": "object"}},
                        "persistentVolumeClaimRetentionPolicy": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "whenDeleted": {"enum": ["Delete", "Retain"]},
                                "whenScaled": {"enum": ["Delete", "Retain"]},
                            },
                        },
                    },
                },
            },
        },
    },
}


def join(path, key):
    """Extends a display path: .name for plain keys, ["k"] for keys with dots or slashes, [i] for items."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if key.replace("_", "a").replace("-", "a").isalnum():
        return f"{path}.{key}" if path else key
    return f'{path}["{key}"]'


def show(path):
    return path or "(document)"


def same_scalar(want, got):
    # Quantities come back from the upstream model as floats (4 -> 4.0); equal numbers are equal,
    # but a bool never equals a number and a string never equals a number.
    numeric = (int, float)
    if isinstance(want, bool) or isinstance(got, bool):
        return type(want) is type(got) and want == got
    if isinstance(want, numeric) and isinstance(got, numeric):
        return want == got
    return type(want) is type(got) and want == got


def diff(want, got, path, out):
    """Appends (path, message) for every place where got differs from want."""
    if isinstance(want, dict) and isinstance(got, dict):
        for key, value in want.items():
            if key not in got:
                out.append((join(path, key), "dropped by the upstream model (unknown field)"))
            else:
                diff(value, got[key], join(path, key), out)
        for key, value in got.items():
            if key not in want:
                out.append((join(path, key), f"added by the upstream model: {value!r}"))
    elif isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            out.append((path, f"list length {len(want)} came back as {len(got)}"))
        for index, (w, g) in enumerate(zip(want, got)):
            diff(w, g, join(path, index), out)
    elif isinstance(want, (dict, list)) or isinstance(got, (dict, list)) or not same_scalar(want, got):
        out.append((path, f"{want!r} came back as {got!r}"))


def k8s_validate(obj, prefix, rebase):
    """Validates obj strictly; returns [(path, message)] with the error path rebased into the file."""
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except jsonschema.ValidationError as err:
        keys = list(err.path)
        path = rebase(keys)
        return [(path, f"{err.message} ({prefix})")]
    except Exception as err:  # a missing schema or a malformed object is a failure too
        return [(prefix, f"{type(err).__name__}: {err}")]
    return []


def path_of(base, keys):
    path = base
    for key in keys:
        path = join(path, key)
    return path


def check_metadata(doc):
    meta = doc.get("metadata")
    if not isinstance(meta, dict):
        return [("metadata", "required object is missing")]
    probe = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}
    return k8s_validate(probe, "metadata as ObjectMeta", lambda keys: path_of("", keys))


def check_kind(doc, expected):
    problems = []
    for field, want in zip(("apiVersion", "kind"), expected):
        if doc.get(field) != want:
            problems.append((field, f"is {doc.get(field)!r}, want {want!r}"))
    return problems


def check_jobset(doc):
    problems = check_kind(doc, JOBSET_API) + check_metadata(doc)
    try:
        model = JobsetV1alpha2JobSet.from_dict(doc)
        diff(doc, model.to_dict() if model is not None else None, "", problems)
    except Exception as err:
        # The generated models build nested objects one by one, so the location pydantic reports is
        # relative to the innermost model (named by its title), not to the document.
        details = err.errors() if hasattr(err, "errors") else [{"loc": (), "msg": str(err)}]
        title = getattr(err, "title", "JobsetV1alpha2JobSet")
        for detail in details:
            loc = path_of("", detail.get("loc", ()))
            problems.append(("", f"rejected by the upstream model {title} at {show(loc)}: {detail.get('msg')}"))
    spec = doc.get("spec") if isinstance(doc.get("spec"), dict) else {}
    rjobs = spec.get("replicatedJobs")
    if not isinstance(rjobs, list) or not rjobs:
        return problems + [("spec.replicatedJobs", "required non-empty list is missing")]
    name = (doc.get("metadata") or {}).get("name") or "jobset"
    for index, rjob in enumerate(rjobs):
        base = f"spec.replicatedJobs[{index}].template"
        template = rjob.get("template") if isinstance(rjob, dict) else None
        if not isinstance(template, dict):
            problems.append((base, "required object is missing"))
            continue
        meta = dict(template.get("metadata") or {})
        meta["name"] = f"{name}-{rjob.get('name', index)}-0"
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": template.get("spec")}
        problems += k8s_validate(job, "as a batch/v1 Job", lambda keys, base=base: path_of(base, keys))
    return problems


def check_lws(doc):
    problems = check_kind(doc, LWS_API) + check_metadata(doc)
    validator = jsonschema.Draft202012Validator(LWS_SCHEMA)
    for err in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.path))):
        problems.append((path_of("", err.path), err.message))
    spec = doc.get("spec") if isinstance(doc.get("spec"), dict) else {}
    lwt = spec.get("leaderWorkerTemplate") if isinstance(spec.get("leaderWorkerTemplate"), dict) else {}
    size, sub = lwt.get("size", 1), lwt.get("subGroupPolicy") or {}
    group = sub.get("subGroupSize") if isinstance(sub, dict) else None
    if isinstance(size, int) and isinstance(group, int) and group > 0 and size % group and (size - 1) % group:
        problems.append(("spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize", "must divide size or size - 1"))
    name = (doc.get("metadata") or {}).get("name") or "lws"
    for which in ("leaderTemplate", "workerTemplate"):
        template = lwt.get(which)
        if not isinstance(template, dict):
            continue  # a missing workerTemplate is already reported by the schema
        base = f"spec.leaderWorkerTemplate.{which}"
        role = "leader" if which == "leaderTemplate" else "worker"
        wrapper = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": f"{name}-{role}"}}
        wrapper["template"] = template

        def rebase(keys, base=base):
            # Errors inside the wrapper's template belong to the LWS template; others to the wrapper.
            return path_of(base, keys[1:]) if keys[:1] == ["template"] else path_of("(PodTemplate wrapper)", keys)

        problems += k8s_validate(wrapper, "as a v1 PodTemplate", rebase)
    return problems


def gang_templates(jobsets):
    """(path, pod template, pods) of every replicated job of the file's JobSets."""
    for d in jobsets:
        for i, rjob in enumerate((d.get("spec") or {}).get("replicatedJobs") or []):
            job = (rjob.get("template") or {}).get("spec") or {}
            pods = (rjob.get("replicas") or 1) * (job.get("parallelism") or 1)
            yield f"spec.replicatedJobs[{i}].template.spec.template", job.get("template") or {}, pods


def check_pod_group(doc, docs):
    schema = POD_GROUP_SCHEMAS.get(doc.get("apiVersion"))
    if schema is None:
        return [("apiVersion", f"is {doc.get('apiVersion')!r}, not a binder trainyard writes for")]
    problems = check_metadata(doc)
    validator = jsonschema.Draft202012Validator(schema)
    for err in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.path))):
        problems.append((path_of("", err.path), err.message))
    where, key = POD_LINKS[doc["apiVersion"]]
    name = (doc.get("metadata") or {}).get("name")
    jobsets = [d for d in docs if isinstance(d, dict) and d.get("kind") == "JobSet"]
    members = 0
    for path, template, pods in gang_templates(jobsets):
        linked = ((template.get("metadata") or {}).get(where) or {}).get(key)
        if linked is None:
            continue
        if linked != name:
            problems.append((path, f"{where}[{key!r}] names {linked!r}, not this PodGroup {name!r}"))
        members += pods
    if members == 0:
        problems.append(("metadata.name", f"no pod template of the file's JobSets names PodGroup {name!r}"))
    elif (doc.get("spec") or {}).get("minMember") != members:
        problems.append(("spec.minMember", f"is {(doc.get('spec') or {}).get('minMember')!r}, the linked templates make {members} pods"))
    return problems


def check_job(doc, config_maps):
    """A strict batch/v1 Job; for an Indexed one, the rules the schema cannot say (API server validation)."""
    problems = check_kind(doc, JOB_API) + k8s_validate(doc, "as a batch/v1 Job", lambda keys: path_of("", keys))
    spec = doc.get("spec") if isinstance(doc.get("spec"), dict) else {}
    pod = (spec.get("template") or {}).get("spec") or {}
    if spec.get("completionMode") == "Indexed" and not isinstance(spec.get("completions"), int):
        problems.append(("spec.completions", "an Indexed Job needs completions"))
    if "backoffLimitPerIndex" in spec and pod.get("restartPolicy") != "Never":
        problems.append(("spec.template.spec.restartPolicy", "backoffLimitPerIndex needs restartPolicy Never"))
    volumes = {v.get("name"): v for v in pod.get("volumes") or [] if isinstance(v, dict)}
    for c, container in enumerate(pod.get("containers") or []):
        for m, mount in enumerate(container.get("volumeMounts") or []):
            if mount.get("name") not in volumes:
                problems.append((f"spec.template.spec.containers[{c}].volumeMounts[{m}]", f"no volume {mount.get('name')!r}"))
    for name, volume in volumes.items():
        source = volume.get("configMap")
        if not isinstance(source, dict):
            continue
        where = f"spec.template.spec.volumes[{name}].configMap"
        cm = config_maps.get(source.get("name"))
        if cm is None:
            problems.append((where, f"ConfigMap {source.get('name')!r} is not in the file"))
            continue
        keys = set(cm.get("data") or {}) | set(cm.get("binaryData") or {})
        for item in source.get("items") or []:
            if item.get("key") not in keys:
                problems.append((where, f"item key {item.get('key')!r} is not in ConfigMap {source.get('name')!r}"))
    return problems


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    files = []
    for root in map(Path, argv[1:]):
        found = sorted(root.glob("*.jobset.yaml")) + sorted(root.glob("*.lws.yaml")) + sorted(root.glob("*.job.yaml"))
        if not found:
            print(f"{root}: no *.jobset.yaml, *.lws.yaml or *.job.yaml files to check")
            return 1
        files += found
    checked, problems = 0, []
    for file in files:
        try:
            docs = [d for d in yaml.safe_load_all(file.read_text()) if d is not None]
        except (OSError, yaml.YAMLError) as err:
            problems.append(f"{file}: {err}")
            continue
        config_maps = {
            (d.get("metadata") or {}).get("name"): d for d in docs if isinstance(d, dict) and d.get("kind") == "ConfigMap"
        }
        if file.name.endswith(".lws.yaml"):
            check = check_lws
        elif file.name.endswith(".job.yaml"):
            check = lambda doc: check_job(doc, config_maps)  # noqa: E731
        else:
            check = check_jobset
        for number, doc in enumerate(docs):
            where = f"{file}" if len(docs) == 1 else f"{file} (document {number + 1})"
            if not isinstance(doc, dict):
                problems.append(f"{where}: not a mapping")
                continue
            checked += 1
            if doc.get("kind") in ("ConfigMap", "Secret"):
                found = k8s_validate(doc, f"v1 {doc['kind']}", lambda keys: path_of("", keys))
            elif doc.get("kind") == "PodGroup":
                found = check_pod_group(doc, docs)
            else:
                found = check(doc)
            problems += [f"{where}: {show(path)}: {message}" for path, message in found]
    if problems:
        print("\n".join(problems))
        print(f"FAILED: {len(problems)} problem(s) in {checked} objects")
        return 1
    print(f"OK: {checked} objects")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
