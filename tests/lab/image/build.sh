#!/usr/bin/env bash
# Builds the product's container image from deploy/Containerfile without any registry: the base is
# a Debian 12 root file system made by debootstrap from Debian's package mirror and imported into
# podman as a local image. Both images are cached by content in podman's storage under CACHE_DIR
# (their tags carry the key), so a warm call only checks that they exist. Prints the image's name.
#
# Expects the podman environment lab.py sets up (CONTAINERS_CONF, CONTAINERS_STORAGE_CONF: runc,
# cgroupfs, host network, storage under CACHE_DIR). Package downloads are the only traffic: apt and
# pip inside the build share the host's network namespace, so podman creates no bridge and no
# firewall rule.
#
# usage: build.sh CACHE_DIR LOG_FILE
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
cache=${1:?usage: build.sh CACHE_DIR LOG_FILE}
log=${2:?usage: build.sh CACHE_DIR LOG_FILE}
: "${CONTAINERS_CONF:?build.sh runs through lab.py, which configures podman}"
mkdir -p "$cache" "$(dirname "$log")"
: >"$log"

SUITE=bookworm
MIRROR=http://deb.debian.org/debian
fail() { echo "image build: $1; see $log" >&2; exit 1; }

base_key=$( { echo "$SUITE $MIRROR minbase"; sed -n '/^# base:begin/,/^# base:end/p' "$0"; } \
  | sha256sum | cut -c1-12)
base="localhost/vmapi-lab/debian-base:$SUITE-$base_key"

# base:begin
build_base() {
  local root
  root=$(mktemp -d "$cache/debootstrap.XXXXXX")
  # shellcheck disable=SC2064
  trap "rm -rf '$root'" RETURN
  echo "image build: debootstrap $SUITE into $root (first time only; log: $log)" >&2
  debootstrap --variant=minbase "$SUITE" "$root" "$MIRROR" >>"$log" 2>&1 \
    || fail "debootstrap failed"
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/var/log/*.log
  tar -C "$root" --numeric-owner -c . | podman import --change 'CMD ["/bin/bash"]' - "$base" \
    >>"$log" 2>&1 || fail "podman import of the base failed"
}
# base:end

if ! podman image exists "$base"; then
  build_base
fi

# What the Containerfile copies (its .dockerignore allows only these) decides the product's key.
sources=(deploy/Containerfile .dockerignore pyproject.toml README.md generic catalog libvirt_provider)
image_key=$( {
  podman image inspect --format '{{.Id}}' "$base"
  cat "$0"
  (cd "$repo" && find "${sources[@]}" -type f ! -path '*/__pycache__/*' -print0 | LC_ALL=C sort -z \
    | xargs -0 sha256sum)
} | sha256sum | cut -c1-12)
image="localhost/vm-api/libvirt-provider:$image_key"
if podman image exists "$image"; then
  echo "$image"
  exit 0
fi

echo "image build: building $image from deploy/Containerfile (log: $log)" >&2
mkdir -p "$cache/pip"
# pip's cache lives outside the clone and outside the image; the Containerfile does not depend on
# it. apt needs none: podman keeps the layers that install Debian packages until the base changes.
# pip in the build trusts what pip here trusts (some networks intercept TLS with their own CA).
ca_bundle=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
podman build --pull=never --network=host --layers \
  --build-arg "BASE=$base" \
  --build-arg PIP_CERT=/run/vmapi-lab-ca.crt \
  --volume "$ca_bundle:/run/vmapi-lab-ca.crt:ro" \
  --volume "$cache/pip:/root/.cache/pip" \
  --file "$repo/deploy/Containerfile" --tag "$image" "$repo" >>"$log" 2>&1 \
  || fail "podman build failed"
# Each change of the sources leaves an image (a few hundred MB) in the cache: keep the newest few,
# which covers the clones of one machine; images a container still uses are refused and stay.
podman images --format '{{.Repository}}:{{.Tag}}' --filter reference=localhost/vm-api/libvirt-provider \
  | tail -n +4 | xargs -r podman rmi >>"$log" 2>&1 || true
echo "$image"
