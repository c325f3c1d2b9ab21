"""The cloud-init seed: Secret data, SSH keys, host name and generated network-config."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import SecretBytes

from generic.api import SecretKeySelector
from libvirt_provider.constants import (
    REASON_INVALID_SPEC,
    REASON_SECRET_NOT_FOUND,
    REASON_SECRET_NOT_READABLE,
    SECRETS_CLUSTER_ROLE,
)
from libvirt_provider.naming import volume_name
from libvirt_provider.resolve.cloudinit import NetworkInterfaceConfig, instance_id, network_config
from libvirt_provider.resolve.context import VM, Context
from libvirt_provider.resolved import CloudInitData


def _secret(ctx: Context, selector: SecretKeySelector, where: str) -> bytes | None:
    data = ctx.secrets.get(selector.name)
    if ctx.secrets_deferred:
        return (data or {}).get(selector.key, b"")
    if data is None and selector.name in ctx.unreadable_secrets:
        namespace = ctx.machine.metadata.namespace
        ctx.problem(
            REASON_SECRET_NOT_READABLE,
            where,
            f"the provider may not read Secret {selector.name!r}: Secrets in namespace "
            f"{namespace!r} are readable only once a cluster admin opts the namespace in, with a "
            f"RoleBinding there to the ClusterRole {SECRETS_CLUSTER_ROLE!r} for the provider's "
            "ServiceAccount (docs/security.md)",
        )
        return None
    if data is None:
        ctx.problem(
            REASON_SECRET_NOT_FOUND,
            where,
            f"Secret {selector.name!r} not found in namespace {ctx.machine.metadata.namespace!r}",
        )
        return None
    if selector.key not in data:
        ctx.problem(
            REASON_SECRET_NOT_FOUND,
            where,
            f"Secret {selector.name!r} has no key {selector.key!r}",
        )
        return None
    return data[selector.key]


def resolve_cloud_init(
    ctx: Context, *, configs: Sequence[NetworkInterfaceConfig], customised: bool, pool: str | None
) -> CloudInitData | None:
    where = f"{VM}.spec.bootstrap.cloudInit"
    selectors = ctx.vm.bootstrap.cloud_init if ctx.vm.bootstrap else None
    network = ctx.vm.network
    nameservers = [str(a) for a in (network.nameservers if network else None) or ()]
    search = list((network.search_domains if network else None) or ())
    customised = customised or bool(nameservers or search)

    user_data = network_data = None
    if selectors is not None and selectors.user_data is not None:
        user_data = _secret(ctx, selectors.user_data, f"{where}.userData")
    if selectors is not None and selectors.network_data is not None:
        network_data = _secret(ctx, selectors.network_data, f"{where}.networkData")
        if customised:
            ctx.problem(
                REASON_INVALID_SPEC,
                f"{where}.networkData",
                "give either a networkData Secret or static addresses, DHCP settings, "
                "nameservers and search domains on the VM, not both",
            )
    elif customised:
        network_data = network_config(configs, nameservers=nameservers, search_domains=search)

    host_name = network.host_name if network else None
    needed = (
        user_data is not None
        or network_data is not None
        or bool(ctx.vm.ssh_public_keys)
        or host_name is not None
    )
    if not needed or pool is None:
        return None
    hostname = host_name or ctx.vm_name
    keys = tuple(ctx.vm.ssh_public_keys or ())
    return CloudInitData(
        instance_id=instance_id(
            ctx.machine.metadata.uid,
            hostname=hostname,
            ssh_public_keys=keys,
            user_data=user_data,
            network_config=network_data,
        ),
        hostname=hostname,
        ssh_public_keys=keys,
        user_data=SecretBytes(user_data) if user_data is not None else None,
        network_config=SecretBytes(network_data) if network_data is not None else None,
        pool=pool,
        volume=volume_name(ctx.domain, "cidata", extension="iso"),
    )
