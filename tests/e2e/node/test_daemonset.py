"""deploy/ for real: the DaemonSet's pod on the lab's node runs machines.

Applied with the lab's overlay (host network, the lab's API server port, the imported image), the
pod must become Ready, show the daemon's log through `kubectl logs`, take the sample pair to Ready
with an address, survive being deleted mid-creation without leaving a second domain or a volume
behind, hold no more rights than deploy/rbac.yaml grants, and roll to a new image tag without
disturbing running guests.
"""

from __future__ import annotations

import subprocess

import libvirt
from kubernetes import client

from tests.support.deployment import NAMESPACE, one_ready_pod
from tests.support.factories import pair
from tests.support.kube import create, domain_of, kubectl, wait_ready
from tests.support.lab_access import LabInfo
from tests.support.virt import machine_volumes
from tests.support.waiting import eventually

ROLLED_IMAGE = "docker.io/vm-api/libvirt-provider:0.1.0-rollout"


def _pair_on(node: str, ns: str, name: str) -> list[dict[str, object]]:
    docs = pair(ns, name)
    docs[1]["metadata"].setdefault("labels", {})["infrastructure.vm-api.io/host"] = node
    docs[1]["spec"]["host"] = node
    return docs


def _domain(
    virt: libvirt.virConnect, api_client: client.ApiClient, ns: str, name: str
) -> libvirt.virDomain:
    return virt.lookupByName(domain_of(api_client, ns, name))


def test_the_pod_becomes_ready_and_kubectl_logs_shows_the_daemon(
    lab: LabInfo, daemonset: client.V1Pod, node: str
) -> None:
    assert daemonset.spec.node_name == node
    assert daemonset.spec.host_network
    logs = kubectl(lab, "-n", NAMESPACE, "logs", daemonset.metadata.name)
    assert f"libvirt-provider on host {node}: libvirt qemu:///system" in logs


def test_the_daemon_runs_without_capabilities_under_the_runtimes_seccomp_filter(
    lab: LabInfo, daemonset: client.V1Pod
) -> None:
    # What the kubelet and runc really applied, read in the container's own /proc: no effective,
    # permitted or bounding capability, and a seccomp filter (mode 2). The pod reached Ready on
    # exactly this, so libvirt's socket and the console folder need no capability.
    status = kubectl(
        lab,
        "-n",
        NAMESPACE,
        "exec",
        daemonset.metadata.name,
        "--",
        "/opt/provider/bin/python",
        "-c",
        "print(open('/proc/1/status').read())",
    )
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    for cap in ("CapEff", "CapPrm", "CapBnd"):
        assert int(fields[cap].strip(), 16) == 0, f"{cap}: {fields[cap].strip()}"
    assert fields["Seccomp"].strip() == "2"
    assert fields["Uid"].split()[0] == "0"


def test_the_sample_pair_becomes_ready_with_an_address_through_the_pod(
    api_client: client.ApiClient, virt: libvirt.virConnect, ns: str, node: str
) -> None:
    create(api_client, _pair_on(node, ns, "sample"))
    status = wait_ready(
        api_client, ns, "sample", what="the sample VM Ready with an address", addresses=True
    )
    assert status["addresses"]
    assert _domain(virt, api_client, ns, "sample").isActive()


def test_deleting_the_pod_mid_creation_leaves_one_domain_and_no_leak(
    lab: LabInfo,
    api_client: client.ApiClient,
    virt: libvirt.virConnect,
    ns: str,
    daemonset: client.V1Pod,
) -> None:
    node = daemonset.spec.node_name
    before = one_ready_pod(api_client)
    create(api_client, _pair_on(node, ns, "hasty"))
    domain = domain_of(api_client, ns, "hasty")
    eventually(
        lambda: bool(machine_volumes(virt, lab, f"{domain}--")),
        timeout=60,
        interval=0.1,
        what="creation under way",
    )
    client.CoreV1Api(api_client).delete_namespaced_pod(
        before.metadata.name, NAMESPACE, grace_period_seconds=30
    )
    one_ready_pod(api_client, other_than=before.metadata.uid)
    wait_ready(api_client, ns, "hasty", what="the VM Ready after the pod was replaced")
    lm = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
        "infrastructure.vm-api.io", "v1alpha1", ns, "libvirtmachines", "hasty"
    )
    ours = [
        d.UUIDString()
        for d in virt.listAllDomains(0)
        if d.name() == domain or d.UUIDString() == lm["metadata"]["uid"]
    ]
    assert ours == [lm["metadata"]["uid"]]
    assert machine_volumes(virt, lab, f"{domain}--") == [f"{domain}--boot.qcow2"]


def test_the_pods_service_account_runs_machines_but_cannot_list_secrets(
    lab: LabInfo, api_client: client.ApiClient, daemonset: client.V1Pod
) -> None:
    # The machines above ran on this ServiceAccount alone; here its token, as the pod holds it,
    # asks for every Secret in the cluster.
    probe = (
        "from kubernetes import client, config\n"
        "from kubernetes.client.exceptions import ApiException\n"
        "config.load_incluster_config()\n"
        "try:\n"
        "    client.CoreV1Api().list_secret_for_all_namespaces()\n"
        "    print('allowed')\n"
        "except ApiException as err:\n"
        "    print('refused', err.status)\n"
    )
    name = one_ready_pod(api_client).metadata.name
    out = kubectl(lab, "-n", NAMESPACE, "exec", name, "--", "/opt/provider/bin/python", "-c", probe)
    assert out.strip() == "refused 403"


def test_a_rolling_update_to_a_new_image_tag_keeps_guests_running(
    lab: LabInfo,
    api_client: client.ApiClient,
    virt: libvirt.virConnect,
    ns: str,
    daemonset: client.V1Pod,
) -> None:
    node = daemonset.spec.node_name
    create(api_client, _pair_on(node, ns, "steady"))
    wait_ready(api_client, ns, "steady", what="the VM Ready before the update")
    domain_id = _domain(virt, api_client, ns, "steady").ID()
    before = one_ready_pod(api_client)

    subprocess.run(
        [
            "ctr",
            "--address",
            str(lab.dir / "node" / "containerd.sock"),
            "-n",
            "k8s.io",
            "images",
            "tag",
            "--force",
            "docker.io/vm-api/libvirt-provider:0.1.0",
            ROLLED_IMAGE,
        ],
        check=True,
        capture_output=True,
    )
    kubectl(
        lab,
        "-n",
        NAMESPACE,
        "set",
        "image",
        "daemonset/libvirt-provider",
        f"provider={ROLLED_IMAGE}",
    )
    after = one_ready_pod(api_client, other_than=before.metadata.uid)
    assert after.spec.containers[0].image == ROLLED_IMAGE
    kubectl(
        lab, "-n", NAMESPACE, "rollout", "status", "daemonset/libvirt-provider", "--timeout=120s"
    )
    assert _domain(virt, api_client, ns, "steady").ID() == domain_id
    wait_ready(api_client, ns, "steady", what="the VM still Ready after the update")
