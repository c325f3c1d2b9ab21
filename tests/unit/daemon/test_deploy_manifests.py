"""deploy/ must stay installable with `kubectl apply -k deploy/` (kustomize reads the CRDs through
crds/Kustomization, which has to name every CRD file there), and coherent with the daemon's
flags: the probes where the kubelet reaches them, /metrics on loopback only."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from libvirt_provider.__main__ import build_parser
from libvirt_provider.constants import (
    CONSOLE_RESOURCE,
    CONSOLE_SUBRESOURCE,
    PORTFORWARD_SUBRESOURCE,
    SECRETS_CLUSTER_ROLE,
    STATS_RESOURCE,
    SUBRESOURCE_GROUP,
    SUBRESOURCE_VERSION,
    VNC_SUBRESOURCE,
)

REPO = Path(__file__).resolve().parents[3]


def test_the_crd_kustomization_names_every_crd_file() -> None:
    kustomization = yaml.safe_load((REPO / "crds" / "Kustomization").read_text())
    listed = set(kustomization["resources"])
    present = {p.name for p in (REPO / "crds").glob("*.yaml")}
    assert listed == present


def test_secrets_are_granted_by_a_role_no_binding_in_deploy_uses() -> None:
    docs = [d for d in yaml.safe_load_all((REPO / "deploy" / "rbac.yaml").read_text()) if d]
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"}
    granting = {
        name
        for name, role in roles.items()
        if any("secrets" in rule.get("resources", []) for rule in role["rules"])
    }
    assert granting == {SECRETS_CLUSTER_ROLE}
    bound = {
        d["roleRef"]["name"] for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
    }
    assert SECRETS_CLUSTER_ROLE not in bound  # a cluster admin binds it per namespace


def _workloads() -> list[tuple[str, dict[str, Any]]]:
    """Every container of deploy/'s DaemonSet and Deployments, with its manifest's name."""
    found = []
    for path in sorted((REPO / "deploy").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") in ("DaemonSet", "Deployment"):
                for container in doc["spec"]["template"]["spec"]["containers"]:
                    found.append((str(path.relative_to(REPO)), container))
    return found


def test_the_manifests_cover_both_workloads() -> None:
    assert {name for name, _ in _workloads()} == {
        "deploy/daemonset.yaml",
        "deploy/remote/deployment.yaml",
    }


@pytest.mark.parametrize(("manifest", "container"), _workloads())
def test_probes_reach_the_health_port_and_metrics_stay_on_loopback(
    manifest: str, container: dict[str, Any]
) -> None:
    """The kubelet probes the pod's address, so the probes must listen there; /metrics must not
    (docs/security.md): the flags the manifest passes, read by the daemon's own parser."""
    args = build_parser().parse_args(container.get("args", []))
    assert not ipaddress.ip_address(args.health_address).is_loopback, manifest
    assert ipaddress.ip_address(args.metrics_address).is_loopback, manifest
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe in ("livenessProbe", "readinessProbe"):
        port = container[probe]["httpGet"]["port"]
        assert ports.get(port, port) == args.health_port, f"{manifest}: {probe}"
    # Nothing on the pod network points at the loopback-only metrics port.
    assert args.metrics_port not in ports.values(), manifest


def test_nothing_in_deploy_exposes_the_metrics_port() -> None:
    metrics_port = build_parser().parse_args([]).metrics_port
    for path in sorted((REPO / "deploy").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") in ("Service", "ServiceMonitor", "PodMonitor"):
                assert str(metrics_port) not in yaml.safe_dump(doc), path


def test_the_node_restriction_names_the_daemonsets_account_and_is_installed() -> None:
    """The policies match requests by user name: a renamed ServiceAccount or namespace would
    leave every node's daemon unrestricted, silently."""
    daemonset = yaml.safe_load((REPO / "deploy" / "daemonset.yaml").read_text())
    account = daemonset["spec"]["template"]["spec"]["serviceAccountName"]
    user = f"system:serviceaccount:{daemonset['metadata']['namespace']}:{account}"
    docs = [d for d in yaml.safe_load_all((REPO / "deploy" / "node-restriction.yaml").read_text())]
    policies = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
    bindings = {d["spec"]["policyName"] for d in docs if d["kind"].endswith("PolicyBinding")}
    assert len(policies) == 4
    for policy in policies:
        assert policy["metadata"]["name"] in bindings
        (condition,) = policy["spec"]["matchConditions"]
        assert f"request.userInfo.username == '{user}'" in condition["expression"]
    kustomization = yaml.safe_load((REPO / "deploy" / "kustomization.yaml").read_text())
    assert "node-restriction.yaml" in kustomization["resources"]


def test_the_daemonset_reads_its_one_migration_secret_into_a_host_path_libvirtd_shares() -> None:
    """The daemon may `get` the Secret its --migration-secret names and no other (by name, in its
    own namespace), and writes the credentials into a host folder mounted at the host's own path:
    the host's libvirtd reads them by the path in the migration URI."""
    daemonset = yaml.safe_load((REPO / "deploy" / "daemonset.yaml").read_text())
    pod = daemonset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = build_parser().parse_args(container["args"])
    assert args.migration_secret
    grants = []
    for doc in yaml.safe_load_all((REPO / "deploy" / "rbac.yaml").read_text()):
        if doc and doc["kind"] in ("Role", "ClusterRole"):
            grants += [
                (doc["kind"], doc["metadata"].get("namespace"), doc["metadata"]["name"], rule)
                for rule in doc["rules"]
                if "secrets" in rule.get("resources", [])
            ]
    roles = [g for g in grants if g[0] == "Role"]
    assert len(roles) == 1, roles
    _, namespace, name, rule = roles[0]
    assert namespace == daemonset["metadata"]["namespace"]
    assert rule["verbs"] == ["get"]
    assert rule["resourceNames"] == [args.migration_secret]
    bindings = [d for d in _docs("rbac.yaml") if d["kind"] == "RoleBinding"]
    (binding,) = [b for b in bindings if b["roleRef"]["name"] == name]
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": pod["serviceAccountName"],
            "namespace": daemonset["metadata"]["namespace"],
        }
    ]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volume = next(v for v in pod["volumes"] if v["name"] == mounts[args.migration_pkipath])
    assert volume["hostPath"]["path"] == args.migration_pkipath


def _docs(*parts: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((REPO / "deploy").joinpath(*parts).read_text()) if d]


def test_the_console_apiservice_names_the_group_and_service_the_daemon_serves() -> None:
    (apiservice,) = _docs("console", "apiservice.yaml")
    (service,) = _docs("console", "service.yaml")
    spec = apiservice["spec"]
    assert apiservice["metadata"]["name"] == f"{SUBRESOURCE_VERSION}.{SUBRESOURCE_GROUP}"
    assert (spec["group"], spec["version"]) == (SUBRESOURCE_GROUP, SUBRESOURCE_VERSION)
    assert spec["service"]["name"] == service["metadata"]["name"]
    assert spec["service"]["namespace"] == service["metadata"]["namespace"]
    assert not spec.get("insecureSkipTLSVerify")
    daemonset = yaml.safe_load((REPO / "deploy" / "daemonset.yaml").read_text())
    labels = daemonset["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    (port,) = service["spec"]["ports"]
    assert port["port"] == spec["service"]["port"]


def test_the_console_patch_gives_the_daemonset_flags_its_parser_takes() -> None:
    """The JSON patch (deploy/console/daemonset-console.json) applied to the DaemonSet: the daemon
    parses its flags, serves the console on the port the Service targets, from the Secret."""
    daemonset = yaml.safe_load((REPO / "deploy" / "daemonset.yaml").read_text())
    pod = daemonset["spec"]["template"]["spec"]
    container = pod["containers"][0]
    for op in json.loads((REPO / "deploy" / "console" / "daemonset-console.json").read_text()):
        assert op["op"] == "add"
        assert op["path"].endswith("/-")
        target: Any = daemonset
        for part in op["path"].strip("/").split("/")[:-1]:
            target = target[int(part)] if isinstance(target, list) else target[part]
        target.append(op["value"])
    args = build_parser().parse_args(container["args"])
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["console"] == args.console_port
    (service,) = _docs("console", "service.yaml")
    assert service["spec"]["ports"][0]["targetPort"] == "console"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert args.console_cert_file.startswith(mounts["console-tls"] + "/")
    assert args.console_key_file.startswith(mounts["console-tls"] + "/")
    assert volumes["console-tls"]["secret"]["secretName"]
    # The hop between daemons (docs/console.md, "Routing"): its port, the console CA from the
    # same Secret, and the pod's IP from the downward API as the address other daemons dial.
    assert ports["console-hop"] == args.console_hop_port
    assert args.console_hop_ca_file.startswith(mounts["console-tls"] + "/")
    assert args.console_advertise_address == "$(POD_IP)"
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"


def test_the_portforward_patch_puts_the_daemon_on_the_hosts_network() -> None:
    """Port-forward dials guests from the daemon: on the host's network, where libvirt's bridges
    are (docs/console.md, "How the daemon reaches the guest"); the pod keeps cluster DNS."""
    ops = json.loads((REPO / "deploy" / "console" / "daemonset-portforward.json").read_text())
    assert {op["path"]: op["value"] for op in ops if op["op"] == "add"} == {
        "/spec/template/spec/hostNetwork": True,
        "/spec/template/spec/dnsPolicy": "ClusterFirstWithHostNet",
    }


def test_the_daemon_may_review_access_and_read_the_front_proxys_trust() -> None:
    docs = _docs("console-rbac.yaml")
    daemonset = yaml.safe_load((REPO / "deploy" / "daemonset.yaml").read_text())
    subject = {
        "kind": "ServiceAccount",
        "name": daemonset["spec"]["template"]["spec"]["serviceAccountName"],
        "namespace": daemonset["metadata"]["namespace"],
    }
    refs = {
        (d["metadata"].get("namespace"), d["roleRef"]["name"])
        for d in docs
        if d["kind"] in ("ClusterRoleBinding", "RoleBinding") and subject in d["subjects"]
    }
    assert refs == {
        (None, "system:auth-delegator"),
        ("kube-system", "extension-apiserver-authentication-reader"),
    }
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"}
    assert set(roles) == {
        "vm-api-libvirtmachine-console",
        "vm-api-libvirtmachine-portforward",
        "vm-api-libvirtmachine-stats",
        "vm-api-libvirtmachine-vnc",
    }
    # kubectl vm vnc and screenshot: get on libvirtmachines/vnc, for editors and admins.
    assert roles["vm-api-libvirtmachine-vnc"]["rules"] == [
        {
            "apiGroups": [SUBRESOURCE_GROUP],
            "resources": [f"{CONSOLE_RESOURCE}/{VNC_SUBRESOURCE}"],
            "verbs": ["get"],
        }
    ]
    # Port-forward: its own role, so a user may have a shell on the console and no stream to
    # the guest's ports, or the other way round; editors and admins have it, as pods/portforward.
    forward = roles["vm-api-libvirtmachine-portforward"]
    assert forward["rules"] == [
        {
            "apiGroups": [SUBRESOURCE_GROUP],
            "resources": [f"{CONSOLE_RESOURCE}/{PORTFORWARD_SUBRESOURCE}"],
            "verbs": ["get"],
        }
    ]
    assert forward["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert roles["vm-api-libvirtmachine-console"]["rules"] == [
        {
            "apiGroups": [SUBRESOURCE_GROUP],
            "resources": [f"{CONSOLE_RESOURCE}/{CONSOLE_SUBRESOURCE}"],
            "verbs": ["get"],
        }
    ]
    # kubectl vm top: get and list, for viewers too (the daemon checks the machines' own RBAC).
    stats = roles["vm-api-libvirtmachine-stats"]
    assert stats["rules"] == [
        {"apiGroups": [SUBRESOURCE_GROUP], "resources": [STATS_RESOURCE], "verbs": ["get", "list"]}
    ]
    assert stats["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    kustomization = yaml.safe_load((REPO / "deploy" / "kustomization.yaml").read_text())
    assert "console-rbac.yaml" in kustomization["resources"]
    # The APIService is not in the default install: unavailable, it would hold namespace deletion.
    others = [r for r in kustomization["resources"] if r != "console-rbac.yaml"]
    assert not any(str(r).startswith("console") for r in others)


def _resources(docs: list[dict[str, Any]], group: str) -> set[str]:
    return {
        resource
        for doc in docs
        if doc["kind"] == "ClusterRole"
        for rule in doc.get("rules") or []
        if group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
    }


def test_the_remote_account_reaches_every_kind_of_the_group_the_node_account_does() -> None:
    """Both modes run the same controllers and watch the same kinds; a kind granted to the nodes'
    account alone leaves the remote daemon's watch of it failing with 403 (as LibvirtMigration's
    did). The remote account may have fewer verbs, never fewer kinds."""
    group = "infrastructure.vm-api.io"
    node = _resources(_docs("rbac.yaml"), group)
    remote = _resources(_docs("remote", "rbac.yaml"), group)
    assert node - remote == set()


def test_the_remote_replicas_keep_console_logs_on_a_volume_of_their_own() -> None:
    """The replicas' root filesystem is read-only: --console-log-dir must be a mounted volume, the
    pod's own (an emptyDir: a restarted replica starts a new log, docs/console.md)."""
    deployment = yaml.safe_load((REPO / "deploy" / "remote" / "deployment.yaml").read_text())
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = build_parser().parse_args(container["args"])
    assert args.remote
    assert args.console_log_dir
    assert container["securityContext"]["readOnlyRootFilesystem"]
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == args.console_log_dir]
    assert not mount.get("readOnly")
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert "emptyDir" in volume
