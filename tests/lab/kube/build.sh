#!/usr/bin/env bash
# Builds the lab's control-plane binary (kube-apiserver + embedded etcd, kube-controller-manager,
# kubectl) once per content of this folder and Go version, into CACHE_DIR outside the clone, so a
# fresh clone on the same machine reuses it. Prints the binary's path.
#
# usage: build.sh CACHE_DIR LOG_FILE
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${1:?usage: build.sh CACHE_DIR LOG_FILE}
log=${2:?usage: build.sh CACHE_DIR LOG_FILE}

command -v go >/dev/null || { echo "kube build: no Go toolchain on PATH" >&2; exit 1; }
release=$(sed -n 's/^[[:space:]]*k8s.io\/kubernetes \(v[0-9.]*\)$/\1/p' "$here/go.mod" | head -n 1)
key=$( { cat "$0" "$here"/go.mod "$here"/go.sum "$here"/*.go; go version; } | sha256sum | cut -c1-12)
out="$cache/kube-lab-$release-$key"
if [ -x "$out/kube-lab" ]; then
  echo "$out/kube-lab"
  exit 0
fi
mkdir -p "$cache" "$(dirname "$log")"
echo "kube build: building kube-apiserver/kubectl $release (first time only; log: $log)" >&2
tmp="$out.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
# Stamp the release into the version packages, as the upstream build does; without it kubectl and
# the API server report v0.0.0 and version skew checks fail.
major=${release#v}; major=${major%%.*}
minor=${release#v*.}; minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$release -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
if ! (cd "$here" && go build -trimpath -ldflags="$ldflags" -o "$tmp/kube-lab" .) >"$log" 2>&1; then
  rm -rf "$tmp"
  echo "kube build: go build failed; see $log" >&2
  exit 1
fi
rm -rf "$out"
mv "$tmp" "$out"
echo "$out/kube-lab"
