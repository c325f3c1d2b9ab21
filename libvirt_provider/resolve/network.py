"""NICs from LibvirtNetworks, and the guest-side configuration each one needs.

An interface with `publicIP: true` needs a network that declares an address pool (otherwise the
field is UnsupportedByProvider). Its address comes from the claims the machine holds
(`Context.public_addresses`); it reaches the guest through a DHCP host reservation where libvirt's
DHCP serves the network (any guest that takes a lease gets it, with or without cloud-init), and
otherwise as a static address in the cloud-init network-config, with the pool's prefix length and
gateway.
"""

from __future__ import annotations

import ipaddress

from pydantic import ValidationError

from catalog.image import LibvirtImage, NicModel
from catalog.lookup import AmbiguousDefaultError
from catalog.network import LibvirtNetwork
from generic.api import Interface as VmInterface
from libvirt_provider.constants import (
    NETWORK_KIND,
    REASON_ADDRESS_POOL_CONFLICT,
    REASON_AMBIGUOUS_DEFAULT,
    REASON_INVALID_SPEC,
    REASON_NOT_AVAILABLE_ON_HOST,
    REASON_REFERENCE_NOT_FOUND,
)
from libvirt_provider.naming import machine_mac_address
from libvirt_provider.resolve.addresses import dhcp_conflict, in_pool, pool_overlaps
from libvirt_provider.resolve.cloudinit import NetworkInterfaceConfig
from libvirt_provider.resolve.context import VM, Context, check_reference, validation_problems
from libvirt_provider.resolve.refusals import NO_POOL
from libvirt_provider.resolved import Interface, InterfaceKind, NicSubnets, PublicAddress

__all__ = ["resolve_interfaces"]


def _default_network(ctx: Context, where: str) -> LibvirtNetwork | None:
    try:
        network = ctx.catalog.default_network()
    except AmbiguousDefaultError as error:
        ctx.problem(REASON_AMBIGUOUS_DEFAULT, where, str(error))
        return None
    if network is None:
        ctx.problem(
            REASON_REFERENCE_NOT_FOUND,
            where,
            "no network is named and no LibvirtNetwork is marked default",
        )
    return network


def resolve_interfaces(
    ctx: Context, image: LibvirtImage | None
) -> tuple[
    list[Interface], list[NetworkInterfaceConfig], bool, list[NicSubnets], list[PublicAddress]
]:
    """NICs, their guest-side configuration, whether that needs a network-config, the subnets
    of the NICs whose network names them, and the public addresses asked for."""
    declared = (ctx.vm.network.interfaces if ctx.vm.network else None) or []
    wanted: list[tuple[str, VmInterface | None]] = [(i.name, i) for i in declared] or [
        ("default", None)
    ]
    nics: list[Interface] = []
    configs: list[NetworkInterfaceConfig] = []
    subnets: list[NicSubnets] = []
    public: list[PublicAddress] = []
    customised = False
    default_model = image.spec.guest.nic_model if image is not None else NicModel.VIRTIO
    for name, spec in wanted:
        where = f"{VM}.spec.network.interfaces[{name}]"
        ref = spec.network if spec is not None else None
        if ref is None:
            network = _default_network(ctx, where)
        elif check_reference(ctx, ref, NETWORK_KIND, f"{where}.network"):
            network = ctx.catalog.networks.get(ref.name)
            if network is None:
                ctx.problem(
                    REASON_REFERENCE_NOT_FOUND,
                    f"{where}.network",
                    f"LibvirtNetwork {ref.name!r} not found",
                )
        else:
            network = None
        if network is None:
            continue
        nic = _interface(ctx, name=name, network=network, default_model=default_model, where=where)
        if nic is None:
            continue
        nics.append(nic)
        if network.spec.subnets:
            subnets.append(NicSubnets(interface=name, subnets=tuple(network.spec.subnets)))
        address = None
        if spec is not None and spec.public_ip:
            address = _public_address(ctx, nic=nic, spec=spec, network=network, where=where)
            if address is not None:
                public.append(address)
        config = _guest_config(nic=nic, spec=spec, network=network, public=address)
        configs.append(config)
        customised = customised or bool(config.addresses or config.dhcp6 or not config.dhcp4)
    return nics, configs, customised, subnets, public


def _public_address(
    ctx: Context, *, nic: Interface, spec: VmInterface, network: LibvirtNetwork, where: str
) -> PublicAddress | None:
    """The public address the NIC asked for, as far as it is known; None with a problem when the
    network cannot give one."""
    name = network.metadata.name
    pool = network.spec.address_pool
    if pool is None:
        ctx.unsupported(f"{where}.publicIP", NO_POOL.format(network=name))
        return None
    conflicts = pool_overlaps(name, ctx.catalog.networks)
    reservation = None
    libvirt_network = network.spec.source.network
    dhcp = (ctx.network_dhcp or {}).get(libvirt_network) if libvirt_network is not None else None
    if dhcp is not None:
        conflict = dhcp_conflict(pool, dhcp)
        if conflict is not None:
            conflicts.append(conflict)
        reservation = libvirt_network
        if spec.dhcp4 is False:
            ctx.problem(
                REASON_INVALID_SPEC,
                f"{where}.dhcp4",
                f"LibvirtNetwork {name!r} hands out public addresses through its DHCP server "
                "(a reservation for the NIC's MAC): publicIP needs dhcp4",
            )
            return None
    if conflicts:
        ctx.problem(
            REASON_ADDRESS_POOL_CONFLICT,
            f"LibvirtNetwork {name}.spec.addressPool",
            "; ".join(conflicts) + "; no address of this pool is handed out until it is fixed",
        )
        return None
    address = (ctx.public_addresses or {}).get(nic.name)
    return PublicAddress(
        interface=nic.name,
        network=name,
        mac=nic.mac,
        pool=pool,
        address=address,
        reservation=reservation,
        in_pool=address is None or in_pool(pool, address),
    )


def _interface(
    ctx: Context, *, name: str, network: LibvirtNetwork, default_model: NicModel, where: str
) -> Interface | None:
    source = network.spec.source
    if source.network is not None:
        kind, device, mode = InterfaceKind.NETWORK, source.network, None
        if device not in ctx.host.networks:
            ctx.problem(
                REASON_NOT_AVAILABLE_ON_HOST,
                f"{where}.network",
                f"libvirt network {device!r} does not exist on host {ctx.host.hostname!r}",
                missing=f"network {device}",
            )
            return None
    elif source.bridge is not None:
        kind, device, mode = InterfaceKind.BRIDGE, source.bridge, None
    else:
        assert source.direct is not None  # exactly one, by the model
        kind, device, mode = InterfaceKind.DIRECT, source.direct.device, source.direct.mode
    try:
        return Interface(
            name=name,
            mac=machine_mac_address(ctx.machine.metadata.uid, name, existing=ctx.existing_macs),
            kind=kind,
            source=device,
            direct_mode=mode,
            model=network.spec.nic_model or default_model,
            address_source=network.spec.effective_address_source(),
        )
    except ValidationError as error:
        ctx.problems.extend(validation_problems(error, where))
        return None


def _guest_config(
    *,
    nic: Interface,
    spec: VmInterface | None,
    network: LibvirtNetwork,
    public: PublicAddress | None,
) -> NetworkInterfaceConfig:
    static = network.spec.static_addressing
    addresses = []
    gateway4, gateway6 = static.ipv4_gateway, static.ipv6_gateway
    dhcp4 = spec.wants_dhcp4() if spec is not None else True
    if public is not None and public.reservation is None and public.address is not None:
        # Delivered as network-data: the public address is the NIC's static address, with the
        # pool's prefix length and gateway; DHCP only where the VM asks for it explicitly.
        addresses.append(f"{public.address}/{public.pool.prefix_length}")
        if public.pool.gateway is not None:
            if public.pool.version == 4:
                gateway4 = public.pool.gateway
            else:
                gateway6 = public.pool.gateway
        dhcp4 = bool(spec.dhcp4) if spec is not None and public.pool.version == 4 else dhcp4
    for text in (spec.addresses if spec is not None else None) or ():
        address = ipaddress.ip_address(text)
        prefix = static.ipv4_prefix_length if address.version == 4 else static.ipv6_prefix_length
        addresses.append(f"{address}/{prefix}")
    return NetworkInterfaceConfig(
        name=nic.name,
        mac=nic.mac,
        addresses=tuple(addresses),
        dhcp4=dhcp4,
        dhcp6=bool(spec.dhcp6) if spec is not None else False,
        gateway4=gateway4,
        gateway6=gateway6,
    )
