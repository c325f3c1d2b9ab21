"""NICs from LibvirtNetworks, and the guest-side configuration each one needs."""

from __future__ import annotations

import ipaddress

from pydantic import ValidationError

from catalog.image import LibvirtImage, NicModel
from catalog.lookup import AmbiguousDefaultError
from catalog.network import LibvirtNetwork
from generic.api import Interface as VmInterface
from libvirt_provider.constants import (
    NETWORK_KIND,
    REASON_AMBIGUOUS_DEFAULT,
    REASON_NOT_AVAILABLE_ON_HOST,
    REASON_REFERENCE_NOT_FOUND,
)
from libvirt_provider.naming import machine_mac_address
from libvirt_provider.resolve.cloudinit import NetworkInterfaceConfig
from libvirt_provider.resolve.context import VM, Context, check_reference, validation_problems
from libvirt_provider.resolved import Interface, InterfaceKind, NicSubnets


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
) -> tuple[list[Interface], list[NetworkInterfaceConfig], bool, list[NicSubnets]]:
    """NICs, their guest-side configuration, whether that needs a network-config, and the
    subnets of the NICs whose network names them."""
    declared = (ctx.vm.network.interfaces if ctx.vm.network else None) or []
    wanted: list[tuple[str, VmInterface | None]] = [(i.name, i) for i in declared] or [
        ("default", None)
    ]
    nics: list[Interface] = []
    configs: list[NetworkInterfaceConfig] = []
    subnets: list[NicSubnets] = []
    customised = False
    default_model = image.spec.guest.nic_model if image is not None else NicModel.VIRTIO
    for name, spec in wanted:
        where = f"{VM}.spec.network.interfaces[{name}]"
        if spec is not None and spec.public_ip:
            ctx.unsupported(
                f"{where}.publicIP", "libvirt hosts have no public IP addresses to hand out"
            )
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
        config = _guest_config(nic=nic, spec=spec, network=network)
        configs.append(config)
        customised = customised or bool(config.addresses or config.dhcp6 or not config.dhcp4)
    return nics, configs, customised, subnets


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
    *, nic: Interface, spec: VmInterface | None, network: LibvirtNetwork
) -> NetworkInterfaceConfig:
    static = network.spec.static_addressing
    addresses = []
    for text in (spec.addresses if spec is not None else None) or ():
        address = ipaddress.ip_address(text)
        prefix = static.ipv4_prefix_length if address.version == 4 else static.ipv6_prefix_length
        addresses.append(f"{address}/{prefix}")
    return NetworkInterfaceConfig(
        name=nic.name,
        mac=nic.mac,
        addresses=tuple(addresses),
        dhcp4=spec.wants_dhcp4() if spec is not None else True,
        dhcp6=bool(spec.dhcp6) if spec is not None else False,
        gateway4=static.ipv4_gateway,
        gateway6=static.ipv6_gateway,
    )
