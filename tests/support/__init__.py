"""What tests, fixtures and benchmarks share, as a library: lab access, waiting, factories.

Why a package: conftest modules are for pytest's fixtures, and a test module is for its tests;
imported as libraries they tangled every directory with every other (and bench/ with tests/).
Helpers live here instead, each module saying what it holds and why:

- `waiting`: the one deadline-bounded wait (standard library only);
- `lab_access`: the running lab's settings and commands (`LabInfo`, `read_lab`, `lab_command`);
- `kube`: the API server: kubectl, CRDs, the objects tests create, read and wait for;
- `virt`: libvirt: test guests' XML, volumes and domains on the lab's hosts;
- `factories`: the bodies tests create (linked pairs, stub CRDs);
- `daemons`: the processes under test (the provider daemon, a fleet of them, the remote daemon,
  the generic controller) and what they announce;
- `hosts`: LibvirtHost objects, placement outcomes and the remote host's Secrets;
- `images`: images served over HTTP to the daemon and their cached bases;
- `stub_provider`: the generic controller's e2e world (a stub provider kind, a namespace helper);
- `deployment`: deploy/'s manifests run in the lab (the container image, the node's DaemonSet);
- `testdriver`: daemons on libvirt's test driver, for benchmarks and the API-server restart test;
- `builders`: unit tests' valid linked pair, catalog and host, each overridable, and the resolver
  run on them;
- `reconciling`: the machine reconciler over the in-memory doubles (`tests/doubles/`);
- `console`: the console subresources in the lab (the APIService on an ExternalName Service to
  localhost, users with a kubeconfig of their own and their RoleBindings, `kubectl vm` console
  and top through pipes, direct requests);
- `vnc`: VNC through the lab's API server (the vnc ClusterRole's binding, `kubectl vm vnc` and
  `kubectl vm screenshot` as processes, an RFB client as far as ServerInit, libvirt's screen size);
- `black_hole`: a remote host on 127.0.0.1 that accepts TCP and never answers, a TLS client
  PKI to try it with, and the process's thread and descriptor counts.
- `dashboard`: deploy/monitoring/grafana-dashboard.json's panels, variables and queries, and a
  query as Grafana sends it (its variables filled in);
- `snapshots`: LibvirtSnapshots as tests make and read them (one body, one read);
- `prometheus`: a real Prometheus (Debian's package) on loopback, scraping daemons under test
  with deploy/monitoring/rules.yaml (each alert's `for:` shortened), and its alerts API.
- `small_pool`: a transient libvirt pool over a small tmpfs in a lab libvirtd's mount namespace,
  cheap to fill (the pool alerts, a snapshot's full pool).

Helpers that only one directory's tests share stay beside them as plain modules (never a conftest
or a test module): tests/unit/domainxml/cases.py and fields.py, tests/unit/images/qcow2_bytes.py,
tests/e2e/migration/moves.py.

Rules, checked by tests/unit/test_test_support.py: nothing imports a conftest or a test module;
conftests hold fixtures and hooks only; this package imports from no other part of tests/ but the
doubles; bench/ may import it, tests/ never imports bench/ (the bench smoke test runs the scripts
as subprocesses); the deadline wait is `waiting.eventually`, written once.

Importing the package itself imports nothing, so that stdlib-only callers can use `waiting`.
"""
