"""One level-triggered pass over one LibvirtMachine: read, decide, act, report.

Every pass looks at the whole state again (the LibvirtMachine, its VirtualMachine, the catalog, the
Secrets, and the domain as libvirt has it) and takes at most the steps needed to move toward the
spec, so it converges from any starting point: a first pass, a pass after a crash between define
and start, a pass after libvirtd restarted. The pure decisions live elsewhere (linkage, resolver,
renderer, power state machine, status); this module sequences them around the two adapters.

Crash safety: the domain UUID is the LibvirtMachine's uid and every volume name derives from the
domain name, so a repeated step finds what an interrupted one made instead of making a second copy.
When this pass creates a machine and a later step of the same pass fails, it removes what it made.

Returns the delay before the next pass is wanted (None: only when something changes).
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError

from catalog.image import LibvirtImage
from catalog.lookup import Catalog
from catalog.machineclass import LibvirtMachineClass
from catalog.network import LibvirtNetwork
from catalog.storage import LibvirtStorageClass
from generic import constants as vmapi
from generic.conditions import find_condition
from libvirt_provider import constants as c
from libvirt_provider import naming
from libvirt_provider.api import LibvirtMachine
from libvirt_provider.cloudinit import build_cidata_iso
from libvirt_provider.driver.base import (
    AddressSource,
    DomainState,
    DomainStatus,
    HostFacts,
    Hypervisor,
    InterfaceAddress,
)
from libvirt_provider.errors import (
    ConflictError,
    ForeignDomainError,
    NotFoundError,
    PermanentError,
    ProviderError,
    RetryableError,
)
from libvirt_provider.faults import crash_point
from libvirt_provider.guest_facts import guest_metadata
from libvirt_provider.images import ImageImporter
from libvirt_provider.linkage import check_link
from libvirt_provider.machine_update import DomainUpdater, ensure_volume
from libvirt_provider.power import (
    ON_STATES,
    PowerAction,
    decide_power,
    is_settled,
    observed_power_state,
)
from libvirt_provider.render import render_domain_xml
from libvirt_provider.resolve import Resolution, resolve_machine
from libvirt_provider.resolved import ResolvedMachine
from libvirt_provider.status import (
    NicAddressPlan,
    Readiness,
    compute_status,
    nics_without_address,
    select_addresses,
    sources_for,
    status_patch,
    waiting_for_address_message,
)

__all__ = ["MachineKey", "MachineReconciler", "MachineStore"]

log = logging.getLogger(__name__)
Obj = dict[str, Any]

CONVERGING_DELAY = 2.0
# No libvirt event announces a DHCP lease, so a running machine without an address is polled;
# often enough that Ready follows the lease closely, cheap enough for many machines.
ADDRESS_POLL_DELAY = 0.5
# Once one NIC has an address the machine is Ready, but another NIC may still be waiting: a static
# address only the guest agent reports appears when the guest's network configuration ran, well
# after the first DHCP lease. Such a machine is polled too, less often.
NIC_ADDRESS_POLL_DELAY = 5.0
RETRY_DELAY = 10.0

# Condition reasons of the provider's own (the contract copies them verbatim to the VM).
REASON_RUNNING = "Running"
REASON_POWERED_OFF = "PoweredOff"
REASON_SUSPENDED = "Suspended"
REASON_STARTING = "Starting"
REASON_WAITING_FOR_ADDRESS = "WaitingForAddress"
REASON_STOPPING = "Stopping"
REASON_FOREIGN_DOMAIN = "ForeignDomain"
REASON_UP_TO_DATE = "UpToDate"
REASON_GUEST_NOT_COMPLYING = "GuestNotComplying"
REASON_IMPORTING_IMAGE = "ImportingImage"
REASON_IMAGE_IMPORT_FAILED = "ImageImportFailed"


@dataclass(frozen=True, order=True)
class MachineKey:
    namespace: str
    name: str


class MachineStore(Protocol):
    """The Kubernetes side as the reconciler needs it (`KubeAdapter` in production)."""

    def get_machine(self, namespace: str, name: str) -> Obj | None: ...
    def get_virtual_machine(self, namespace: str, name: str) -> Obj | None: ...
    def list_cluster(self, plural: str) -> list[Obj]: ...
    def get_secret_data(self, namespace: str, name: str) -> dict[str, str] | None: ...
    def patch_machine_status(self, namespace: str, name: str, status: Obj) -> None: ...
    def set_finalizers(
        self, namespace: str, name: str, finalizers: list[str], resource_version: str
    ) -> None: ...
    def event(self, obj: Obj, *, reason: str, message: str, warning: bool = False) -> None: ...


@dataclass
class _Graceful:
    since: dt.datetime
    last: dt.datetime


@dataclass
class _Pass:
    """What one pass learned, for the status it writes at the end."""

    obj: Obj
    machine: LibvirtMachine
    domain_name: str
    # The linked VirtualMachine, once the link is verified: problems are told on it too.
    linked_vm: Obj | None = None
    domain_uuid: str | None = None
    power_state: str | None = None
    readiness: Readiness | None = None
    addresses: list[dict[str, str]] = field(default_factory=list)
    guest: dict[str, str] = field(default_factory=dict)
    pending: list[str] = field(default_factory=list)
    # Set when a volume the spec added cannot be made yet: the definition waits with it.
    waiting_for_image: str | None = None
    shutdown_requested_at: dt.datetime | None = None


class MachineReconciler:
    def __init__(
        self,
        *,
        store: MachineStore,
        hypervisor: Hypervisor,
        host: str,
        domain_types: frozenset[str] | None = None,
        images: ImageImporter | None = None,
        console_log_dir: str | None = None,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self._store = store
        self._images = images or ImageImporter(hypervisor)
        # Restricts the domain types offered to the resolver (e.g. a host whose /dev/kvm exists
        # but cannot run guests is told to offer only "qemu").
        self._domain_types = domain_types
        self._console_log_dir = console_log_dir
        self._hv = hypervisor
        self._updater = DomainUpdater(hypervisor=hypervisor, events=store, images=self._images)
        self._host = host
        self._clock = clock
        self._graceful: dict[str, _Graceful] = {}

    # -- entry -------------------------------------------------------------------------------

    def reconcile(self, key: MachineKey) -> float | None:
        obj = self._store.get_machine(key.namespace, key.name)
        if obj is None:
            return None
        try:
            machine = LibvirtMachine.model_validate(obj)
        except ValidationError as err:
            self._report_invalid(obj, err)
            return None
        if machine.metadata.labels.get(c.HOST_LABEL) != self._host:
            return None  # another host's machine: its own daemon reconciles it
        p = _Pass(
            obj=obj,
            machine=machine,
            domain_name=naming.domain_name(key.namespace, key.name),
        )
        if (obj.get("metadata") or {}).get("deletionTimestamp"):
            return self._delete(p)
        if c.FINALIZER not in ((obj.get("metadata") or {}).get("finalizers") or []):
            self._add_finalizer(p)
            return 0.0
        try:
            delay = self._converge(p)
        except RetryableError as err:
            self._fail(p, vmapi.REASON_PROVIDER_ERROR, f"libvirt is unavailable: {err}")
            delay = RETRY_DELAY
        except ProviderError as err:
            self._fail(p, vmapi.REASON_PROVIDER_ERROR, str(err))
            delay = RETRY_DELAY
        self._write_status(p)
        return delay

    # -- the normal path ---------------------------------------------------------------------

    def _converge(self, p: _Pass) -> float | None:
        meta = p.machine.metadata
        vm_name = meta.annotations.get(vmapi.LINK_ANNOTATION)
        vm_obj = self._store.get_virtual_machine(meta.namespace, vm_name) if vm_name else None
        link = check_link(p.obj, vm_obj)
        if not link.linked or vm_obj is None:
            self._fail(p, link.reason or "NotLinked", link.message or "not linked")
            return None
        p.linked_vm = vm_obj
        spec = vm_obj.get("spec") or {}
        desired_power = str(spec.get("powerState") or vmapi.POWERED_ON)
        power_off_mode = str(spec.get("powerOffMode") or vmapi.POWER_OFF_TRY_SOFT)

        try:
            existing = self._hv.lookup(uuid=meta.uid, name=p.domain_name)
        except ForeignDomainError as err:
            self._fail(p, REASON_FOREIGN_DOMAIN, str(err))
            return None

        resolution = self._resolve(p, vm_obj)
        if resolution.machine is None:
            self._fail(p, resolution.problems[0].reason, resolution.message())
            if existing is not None:
                p.domain_uuid = existing.uuid
                p.power_state = observed_power_state(self._hv.status(existing.uuid))
            return None
        plan = resolution.machine
        if existing is None:
            waiting = self._wait_for_images(p, plan)
            if waiting is not None:
                return waiting
            self._create(p, plan, desired_power)
            return CONVERGING_DELAY
        p.domain_uuid = existing.uuid
        # Updating the definition, live changes and disk growth leave the power state as it is:
        # one read serves them and the power decision.
        status = self._hv.status(existing.uuid)
        outcome = self._updater.update(p.obj, existing.uuid, plan, status)
        p.pending, p.waiting_for_image = outcome.pending, outcome.waiting_for_image
        self._hv.set_autostart(existing.uuid, plan.autostart)
        return self._power_and_observe(p, plan, desired_power, power_off_mode, status)

    def _resolve(self, p: _Pass, vm_obj: Obj) -> Resolution:
        catalog = Catalog.of(
            images=_parse_all(self._store, c.IMAGE_PLURAL, LibvirtImage),
            machine_classes=_parse_all(self._store, c.MACHINE_CLASS_PLURAL, LibvirtMachineClass),
            networks=_parse_all(self._store, c.NETWORK_PLURAL, LibvirtNetwork),
            storage_classes=_parse_all(self._store, c.STORAGE_CLASS_PLURAL, LibvirtStorageClass),
        )
        return resolve_machine(
            vm_name=str((vm_obj.get("metadata") or {}).get("name")),
            vm_spec=vm_obj.get("spec") or {},
            machine=p.obj,
            catalog=catalog,
            secrets=self._secrets(p.machine.metadata.namespace, vm_obj),
            host=self._host_facts(),
        )

    def _secrets(self, namespace: str, vm_obj: Obj) -> dict[str, dict[str, bytes]]:
        """The Secrets the VM's cloud-init names; a missing one is simply absent (a problem)."""
        cloud_init = ((vm_obj.get("spec") or {}).get("bootstrap") or {}).get("cloudInit") or {}
        found: dict[str, dict[str, bytes]] = {}
        for selector in (cloud_init.get("userData"), cloud_init.get("networkData")):
            name = selector.get("name") if isinstance(selector, dict) else None
            if not isinstance(name, str) or name in found:
                continue
            raw = self._store.get_secret_data(namespace, name)
            if raw is not None:
                found[name] = {k: base64.b64decode(v) for k, v in raw.items()}
        return found

    def _host_facts(self) -> HostFacts:
        facts = replace(self._hv.host_facts(), console_log_dir=self._console_log_dir)
        if self._domain_types is None:
            return facts
        return replace(facts, domain_types=facts.domain_types & self._domain_types)

    def _create(self, p: _Pass, plan: ResolvedMachine, desired_power: str) -> None:
        made_volumes: list[tuple[str, str]] = []
        defined = False
        try:
            for volume in plan.volumes:
                if ensure_volume(self._hv, volume):
                    made_volumes.append((volume.pool, volume.volume))
            if plan.cloud_init is not None:
                ci = plan.cloud_init
                if self._hv.find_volume(ci.pool, ci.volume) is None:
                    self._hv.upload_volume(pool=ci.pool, name=ci.volume, data=build_cidata_iso(ci))
                    made_volumes.append((ci.pool, ci.volume))
            crash_point("create:after-volumes")
            ref = self._hv.define(render_domain_xml(plan.domain))
            defined = True
            crash_point("create:after-define")
            self._hv.set_autostart(ref.uuid, plan.autostart)
            p.domain_uuid = ref.uuid
            self._store.event(p.obj, reason="Defined", message=f"defined domain {ref.name}")
            if desired_power == vmapi.POWERED_ON:
                self._hv.start(ref.uuid)
                crash_point("create:after-start")
                self._store.event(p.obj, reason="Started", message=f"started domain {ref.name}")
        except ProviderError:
            self._undo_create(p, defined=defined, volumes=made_volumes)
            raise
        p.power_state = observed_power_state(self._hv.status(str(plan.domain.uuid)))
        p.readiness = Readiness(
            ready=False,
            reason=REASON_STARTING,
            message="the domain was created and is starting",
            up_to_date=True,
            up_to_date_reason=REASON_UP_TO_DATE,
            up_to_date_message="the domain matches the spec",
        )

    def _wait_for_images(self, p: _Pass, plan: ResolvedMachine) -> float | None:
        """None when every base image is in the pool; else report the import and come back."""
        for volume in plan.volumes:
            if volume.base is None:
                continue
            state = self._images.ensure(volume.base)
            if state.ready:
                continue
            name = volume.base.image
            if state.failed:
                self._fail(p, REASON_IMAGE_IMPORT_FAILED, f"image {name!r}: {state.message}")
                return RETRY_DELAY
            progress = (
                f"{state.bytes_done} of {state.bytes_total} bytes"
                if state.bytes_total
                else "starting"
            )
            p.readiness = Readiness(
                ready=False,
                reason=REASON_IMPORTING_IMAGE,
                message=f"importing image {name!r} into pool {volume.base.pool!r}: {progress}",
                up_to_date=False,
                up_to_date_reason=REASON_IMPORTING_IMAGE,
                up_to_date_message="the machine is created once its image is imported",
            )
            return CONVERGING_DELAY
        return None

    def _undo_create(self, p: _Pass, *, defined: bool, volumes: list[tuple[str, str]]) -> None:
        uuid = p.machine.metadata.uid
        try:
            if defined:
                self._remove_domain(uuid)
            for pool, name in volumes:
                self._hv.delete_volume(pool, name)
        except ProviderError as err:
            log.warning("cleaning up a failed create of %s left something: %s", p.domain_name, err)
        p.domain_uuid = None

    def _power_and_observe(
        self, p: _Pass, plan: ResolvedMachine, desired: str, mode: str, status: DomainStatus
    ) -> float | None:
        uuid = str(plan.domain.uuid)
        now = self._clock()
        if desired == vmapi.POWERED_OFF and uuid not in self._graceful:
            # A restarted daemon goes on with the power-off an earlier one began.
            started = _parse_time((p.obj.get("status") or {}).get("shutdownRequestedAt"))
            if started is not None:
                self._graceful[uuid] = _Graceful(since=started, last=started)
        graceful = self._graceful.get(uuid) if desired == vmapi.POWERED_OFF else None
        if desired != vmapi.POWERED_OFF:
            self._graceful.pop(uuid, None)
        decision = decide_power(
            desired=desired,
            mode=mode,
            status=status,
            now=now,
            graceful_since=graceful.since if graceful else None,
            last_graceful_request=graceful.last if graceful else None,
            timeout=dt.timedelta(seconds=plan.shutdown_timeout_seconds),
        )
        if decision.action is not PowerAction.NONE:
            self._act(p, uuid, decision.action)
            if decision.action is PowerAction.SHUTDOWN:
                if decision.graceful_started or graceful is None:
                    self._graceful[uuid] = _Graceful(since=now, last=now)
                else:
                    graceful.last = now
            status = self._hv.status(uuid)
        if status.state is DomainState.SHUTOFF:
            self._graceful.pop(uuid, None)
        if uuid in self._graceful:
            p.shutdown_requested_at = self._graceful[uuid].since

        p.power_state = observed_power_state(status)
        p.addresses = self._observe_addresses(p, plan, uuid, running=status.state in ON_STATES)
        p.guest = self._observe_guest(p, uuid, running=status.state in ON_STATES)
        settled = is_settled(desired, status)
        network_data = plan.cloud_init is not None and plan.cloud_init.network_config is not None
        p.readiness = self._readiness(
            p, desired, settled, decision.problem, network_data=network_data
        )
        if not settled:
            return CONVERGING_DELAY
        if desired == vmapi.POWERED_ON and not p.addresses:
            return ADDRESS_POLL_DELAY
        nic_names = [i.name for i in plan.domain.interfaces]
        if desired == vmapi.POWERED_ON and nics_without_address(nic_names, p.addresses):
            return NIC_ADDRESS_POLL_DELAY
        return None

    def _act(self, p: _Pass, uuid: str, action: PowerAction) -> None:
        steps: dict[PowerAction, tuple[Callable[[str], None], str, str]] = {
            PowerAction.START: (self._hv.start, "Started", "started the domain"),
            PowerAction.RESUME: (self._hv.resume, "Resumed", "resumed the paused domain"),
            PowerAction.WAKE: (self._hv.start, "Woken", "woke the domain"),
            PowerAction.SHUTDOWN: (
                self._hv.shutdown,
                "ShutdownRequested",
                "asked the guest to power off (its agent if connected, else the power button)",
            ),
            PowerAction.DESTROY: (self._hv.destroy, "PoweredOff", "powered the domain off"),
            PowerAction.MANAGED_SAVE: (
                self._hv.managed_save,
                "Suspended",
                "saved the domain's memory and stopped it",
            ),
            PowerAction.DISCARD_SAVED_STATE: (
                self._hv.discard_saved_state,
                "SavedStateDiscarded",
                "dropped the saved memory: the next start is a cold boot",
            ),
        }
        call, reason, message = steps[action]
        try:
            call(uuid)
        except ConflictError as err:
            # The domain changed state under us (e.g. the guest shut itself down); next pass sees.
            log.info("%s on %s: %s", action.value, p.domain_name, err)
            return
        self._store.event(p.obj, reason=reason, message=message)

    def _observe_addresses(
        self, p: _Pass, plan: ResolvedMachine, uuid: str, *, running: bool
    ) -> list[dict[str, str]]:
        nics = [
            NicAddressPlan(name=i.name, mac=i.mac, policy=i.address_source)
            for i in plan.domain.interfaces
        ]
        observed: dict[AddressSource, list[InterfaceAddress]] = {}
        if running:
            wanted = {s for nic in nics for s in sources_for(nic.policy)}
            for source in wanted:
                try:
                    observed[source] = self._hv.addresses(uuid, source)
                except (RetryableError, PermanentError, ConflictError) as err:
                    # No agent in the guest, no lease yet: not an error of the machine.
                    log.debug("addresses of %s from %s: %s", p.domain_name, source.value, err)
        previous = list((p.obj.get("status") or {}).get("addresses") or [])
        return select_addresses(nics, observed, previous, running=running)

    def _observe_guest(self, p: _Pass, uuid: str, *, running: bool) -> dict[str, str]:
        if not running:
            return {}
        try:
            info = self._hv.guest_info(uuid)
        except (RetryableError, PermanentError, ConflictError) as err:
            log.debug("guest info of %s: %s", p.domain_name, err)
            return {}
        return guest_metadata(info, running=running)

    def _readiness(
        self,
        p: _Pass,
        desired: str,
        settled: bool,
        problem: str | None,
        *,
        network_data: bool = False,
    ) -> Readiness:
        if p.waiting_for_image is not None:
            up = (False, REASON_IMPORTING_IMAGE, p.waiting_for_image)
        elif p.pending:
            up = (
                False,
                vmapi.REASON_REQUIRES_POWER_OFF,
                "applied at the next power-off: " + "; ".join(p.pending),
            )
        else:
            up = (True, REASON_UP_TO_DATE, "the domain matches the spec")
        if problem is not None and not settled:
            ready = (False, REASON_GUEST_NOT_COMPLYING, problem)
        elif not settled:
            reason = REASON_STARTING if desired == vmapi.POWERED_ON else REASON_STOPPING
            ready = (False, reason, f"moving to {desired}; now {p.power_state or 'in transition'}")
        elif desired == vmapi.POWERED_ON and not p.addresses:
            message = waiting_for_address_message(network_data=network_data)
            ready = (False, REASON_WAITING_FOR_ADDRESS, message)
        elif desired == vmapi.POWERED_ON:
            ready = (True, REASON_RUNNING, "running and reachable")
        elif desired == vmapi.SUSPENDED:
            ready = (True, REASON_SUSPENDED, problem or "suspended (memory saved to disk)")
        else:
            ready = (True, REASON_POWERED_OFF, "powered off as requested")
        return Readiness(*ready, *up)

    # -- deletion ----------------------------------------------------------------------------

    def _delete(self, p: _Pass) -> float | None:
        meta = p.obj.get("metadata") or {}
        if c.FINALIZER not in (meta.get("finalizers") or []):
            return None
        uuid = p.machine.metadata.uid
        try:
            self._teardown(p, uuid)
        except ProviderError as err:
            message = f"cleanup failed, keeping the finalizer: {err}"
            self._store.event(p.obj, reason="CleanupFailed", message=message, warning=True)
            self._fail(p, vmapi.REASON_PROVIDER_ERROR, message)
            self._write_status(p)
            return RETRY_DELAY
        self._graceful.pop(uuid, None)
        remaining = [f for f in meta.get("finalizers") or [] if f != c.FINALIZER]
        try:
            self._store.set_finalizers(
                p.machine.metadata.namespace,
                p.machine.metadata.name,
                remaining,
                str(meta.get("resourceVersion")),
            )
        except (ConflictError, NotFoundError):
            return 0.0
        return None

    def _teardown(self, p: _Pass, uuid: str) -> None:
        try:
            ref = self._hv.lookup(uuid=uuid, name=p.domain_name)
        except ForeignDomainError:
            ref = None  # the domain holding our name is not ours: never touched
        keep = self._volumes_to_keep(p)
        if ref is not None:
            self._remove_domain(uuid)
            crash_point("delete:after-undefine")
            self._store.event(p.obj, reason="Undefined", message=f"removed domain {ref.name}")
        self._remove_console_log(p)
        prefix = f"{p.domain_name}--"
        for pool in sorted(self._hv.host_facts().pools):
            for volume in self._hv.list_volumes(pool):
                if volume.name.startswith(prefix) and (pool, volume.name) not in keep:
                    try:
                        self._hv.delete_volume(pool, volume.name)
                    except NotFoundError:
                        continue
                    self._store.event(
                        p.obj, reason="VolumeDeleted", message=f"deleted {pool}/{volume.name}"
                    )

    def _remove_domain(self, uuid: str) -> None:
        if self._hv.status(uuid).state is not DomainState.SHUTOFF:
            self._hv.destroy(uuid)
        self._hv.undefine(uuid)

    def _remove_console_log(self, p: _Pass) -> None:
        # The log is a host file the domain wrote, not a volume: it goes with the machine.
        path = naming.console_log_file(self._console_log_dir, p.domain_name)
        if path is None:
            return
        try:
            Path(path).unlink(missing_ok=True)
        except OSError as err:
            log.warning("could not remove the console log %s: %s", path, err)

    def _volumes_to_keep(self, p: _Pass) -> set[tuple[str, str]]:
        """Volumes whose disks say deleteOnTermination: false (needs the VM, still present while
        the generic controller waits for this object to go)."""
        meta = p.machine.metadata
        vm_name = meta.annotations.get(vmapi.LINK_ANNOTATION)
        vm_obj = self._store.get_virtual_machine(meta.namespace, vm_name) if vm_name else None
        if vm_obj is None or not check_link(p.obj, vm_obj).linked:
            return set()
        try:
            resolution = self._resolve(p, vm_obj)
        except ProviderError:
            return set()
        if resolution.machine is None:
            return set()
        return {
            (v.pool, v.volume) for v in resolution.machine.volumes if not v.delete_on_termination
        }

    # -- reporting ---------------------------------------------------------------------------

    def _add_finalizer(self, p: _Pass) -> None:
        meta = p.obj.get("metadata") or {}
        finalizers = [*(meta.get("finalizers") or []), c.FINALIZER]
        # A conflict means the object changed meanwhile; the next pass reads it again.
        with contextlib.suppress(ConflictError, NotFoundError):
            self._store.set_finalizers(
                p.machine.metadata.namespace,
                p.machine.metadata.name,
                finalizers,
                str(meta.get("resourceVersion")),
            )

    def _fail(self, p: _Pass, reason: str, message: str) -> None:
        """Report a problem: conditions False with `reason`, and a Warning Event when it is new."""
        before = find_condition(
            (p.obj.get("status") or {}).get("conditions"), vmapi.CONDITION_INFRASTRUCTURE_READY
        )
        p.readiness = Readiness(
            ready=False,
            reason=reason,
            message=message,
            up_to_date=False,
            up_to_date_reason=reason,
            up_to_date_message=message,
        )
        if before is None or before.get("reason") != reason or before.get("message") != message:
            self._store.event(p.obj, reason=reason, message=message, warning=True)
            if p.linked_vm is not None:
                self._store.event(p.linked_vm, reason=reason, message=message, warning=True)

    def _report_invalid(self, obj: Obj, err: ValidationError) -> None:
        message = _validation_message("LibvirtMachine", err)
        self._store.event(obj, reason=c.REASON_INVALID_SPEC, message=message, warning=True)

    def _write_status(self, p: _Pass) -> None:
        if p.readiness is None:
            return
        current = p.obj.get("status") or {}
        desired = compute_status(
            current=current,
            power_state=p.power_state,
            host=self._host,
            domain_uuid=p.domain_uuid,
            domain_name=p.domain_name,
            addresses=p.addresses,
            guest=p.guest,
            readiness=p.readiness,
            generation=p.machine.metadata.generation,
            pending_changes=p.pending,
            now=_format_time(self._clock()),
            shutdown_requested_at=_format_time(p.shutdown_requested_at)
            if p.shutdown_requested_at is not None
            else None,
        )
        patch = status_patch(current, desired)
        if patch:
            meta = p.machine.metadata
            self._store.patch_machine_status(meta.namespace, meta.name, patch)


def _parse_all(store: MachineStore, plural: str, model: Any) -> list[Any]:
    parsed = []
    for obj in store.list_cluster(plural):
        try:
            parsed.append(model.model_validate(obj))
        except ValidationError as err:
            name = (obj.get("metadata") or {}).get("name")
            log.warning("ignoring invalid %s %s: %s", plural, name, err.error_count())
    return parsed


def _format_time(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(text: object) -> dt.datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        return None


def _validation_message(kind: str, err: ValidationError) -> str:
    parts = []
    for e in err.errors()[:5]:
        where = ".".join(str(x) for x in e["loc"])
        parts.append(f"{where}: {e['msg']}")
    return f"invalid {kind}: " + "; ".join(parts)
