"""The gang objects of the binders trainyard writes for, as JSON schemas.

No pinned package ships these CRDs, so their spec is written out here from each project's
published API types (field names, types, bounds, enums), strictly (a field they do not define is
an error):
  - scheduler-plugins' coscheduling PodGroup, scheduling.x-k8s.io/v1alpha1
    (kubernetes-sigs/scheduler-plugins, apis/scheduling/v1alpha1, v0.35);
  - Volcano's PodGroup, scheduling.volcano.sh/v1beta1 (volcano-sh/apis,
    pkg/apis/scheduling/v1beta1, v1.13);
  - KAI's PodGroup, scheduling.run.ai/v2alpha2 (kai-scheduler/KAI-Scheduler,
    pkg/apis/scheduling/v2alpha2, v0.17).
Metadata is checked as Kubernetes ObjectMeta by the caller.
"""

INT32 = {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1}
QUANTITY = {
    "anyOf": [
        {"type": "integer"},
        {"type": "string", "pattern": r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?[0-9]+))?$"},
    ]
}
RESOURCE_LIST = {"type": "object", "additionalProperties": QUANTITY}
DNS_SUBDOMAIN = {"type": "string", "maxLength": 253, "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"}


def _strict(properties, **more):
    """An object of these properties and no others."""
    return {"type": "object", "additionalProperties": False, "properties": properties, **more}


def _object(spec):
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"const": "PodGroup"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": {"type": "object"},
        },
    }


COSCHEDULING = _object(
    _strict(
        {
            "minMember": {"type": "integer", "minimum": 1, "maximum": 2**31 - 1},
            "minResources": RESOURCE_LIST,
            "scheduleTimeoutSeconds": INT32,
        }
    )
)

_VOLCANO_TOPOLOGY = _strict(
    {
        "mode": {"enum": ["hard", "soft"]},
        "highestTierAllowed": {"type": "integer", "minimum": 0},
        "highestTierName": {"type": "string"},
    },
    # highestTierAllowed and highestTierName exclude each other.
    **{"not": {"required": ["highestTierAllowed", "highestTierName"]}},
)

VOLCANO = _object(
    _strict(
        {
            "minMember": {"type": "integer", "minimum": 0, "maximum": 2**31 - 1},
            "minTaskMember": {"type": "object", "additionalProperties": INT32},
            "queue": DNS_SUBDOMAIN,
            "priorityClassName": {"type": "string"},
            "minResources": RESOURCE_LIST,
            "networkTopology": _VOLCANO_TOPOLOGY,
            "subGroupPolicy": {"type": "array", "items": {"type": "object"}},
        }
    )
)

_KAI_TOPOLOGY = _strict(
    {
        "preferredTopologyLevel": {"type": "string"},
        "requiredTopologyLevel": {"type": "string"},
        "topology": {"type": "string"},
    }
)

KAI = _object(
    _strict(
        {
            "minMember": {"type": "integer", "minimum": 0, "maximum": 2**31 - 1},
            "minSubGroup": {"type": "integer", "minimum": 0, "maximum": 2**31 - 1},
            "queue": {"type": "string"},
            "priorityClassName": {"type": "string"},
            "preemptibility": {"enum": ["preemptible", "non-preemptible"]},
            "topologyConstraint": _KAI_TOPOLOGY,
            "subGroups": {"type": "array", "items": {"type": "object"}},
            "markUnschedulable": {"type": "boolean"},
            "schedulingBackoff": {"type": "integer"},
            "preemptionDelay": {"type": "string"},
            "stalenessGracePeriod": {"type": "string"},
        },
        # minMember and minSubGroup exclude each other (KAI's admission webhook).
        **{"not": {"required": ["minMember", "minSubGroup"]}},
    )
)

BY_API_VERSION = {
    "scheduling.x-k8s.io/v1alpha1": COSCHEDULING,
    "scheduling.volcano.sh/v1beta1": VOLCANO,
    "scheduling.run.ai/v2alpha2": KAI,
}

# What each binder's pods carry to join the group named in the value.
POD_LINKS = {
    "scheduling.x-k8s.io/v1alpha1": ("labels", "scheduling.x-k8s.io/pod-group"),
    "scheduling.volcano.sh/v1beta1": ("annotations", "scheduling.k8s.io/group-name"),
    "scheduling.run.ai/v2alpha2": ("annotations", "pod-group-name"),
}
