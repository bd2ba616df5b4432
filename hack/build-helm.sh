#!/usr/bin/env bash
# Build `helm` (v3) from its Go module into a cache folder outside the repository, only when it is
# missing or out of date:
#
#   ${ASCEND_DRA_CACHE:-$HOME/.cache/ascend-dra}/helm-<version>/bin/helm
#
# The version is the one hack/go-helm/go.mod requires; the binary's stamp (version + hash of go.mod
# and go.sum) makes a bumped wrapper module rebuild it. GOMODCACHE and GOCACHE stay at Go's
# defaults, shared with tests/cluster/build.sh. Prints the binary's path last.
#
# Usage: hack/build-helm.sh            build if missing, print the path
#        hack/build-helm.sh --print    only print the path
#        hack/build-helm.sh --force    rebuild
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MOD="$HERE/go-helm"
VERSION="$(awk '$1 == "require" && $2 == "helm.sh/helm/v3" {print $3}' "$MOD/go.mod")"
[[ -n "$VERSION" ]] || { echo "build-helm.sh: cannot read the helm version from $MOD/go.mod" >&2; exit 2; }
BIN_DIR="${ASCEND_DRA_CACHE:-$HOME/.cache/ascend-dra}/helm-$VERSION/bin"
STAMP="$VERSION $(cat "$MOD/go.mod" "$MOD/go.sum" | sha256sum | cut -c1-16)"

current() { [[ -x "$BIN_DIR/helm" && -f "$BIN_DIR/.helm.stamp" && "$(cat "$BIN_DIR/.helm.stamp")" == "$STAMP" ]]; }

force=0
case "${1:-}" in
    "") ;;
    --print) echo "$BIN_DIR/helm"; exit 0 ;;
    --force) force=1 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "build-helm.sh: unknown argument $1" >&2; exit 2 ;;
esac
if ((force == 0)) && current; then echo "$BIN_DIR/helm"; exit 0; fi

GO="${GO:-}"
if [[ -z "$GO" ]]; then
    if command -v go >/dev/null; then GO="$(command -v go)"
    elif [[ -x /usr/local/go/bin/go ]]; then GO=/usr/local/go/bin/go
    else echo "build-helm.sh: no Go toolchain (need Go >= 1.25 on PATH or in /usr/local/go)" >&2; exit 1
    fi
fi

mkdir -p "$BIN_DIR"
exec 9>"$BIN_DIR/../.build.lock"
flock 9
if ((force == 0)) && current; then echo "$BIN_DIR/helm"; exit 0; fi  # built meanwhile

# As helm's own Makefile: its version, and the Kubernetes version it assumes without a cluster
# (`helm template`'s .Capabilities.KubeVersion, the deprecation lint) from the client-go it uses.
client_go="$(cd "$MOD" && "$GO" list -mod=readonly -m -f '{{.Version}}' k8s.io/client-go)"  # v0.35.1
k8s_minor="$(echo "$client_go" | cut -d. -f2)"
LDF="-s -w -X helm.sh/helm/v3/internal/version.version=$VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    LDF+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
done

echo "== building helm $VERSION (client-go $client_go) into $BIN_DIR ..." >&2
t0=$(date +%s.%N)
(cd "$MOD" && CGO_ENABLED=0 "$GO" build -mod=readonly -trimpath -ldflags "$LDF" -o "$BIN_DIR/.helm.tmp" helm.sh/helm/v3/cmd/helm)
mv -f "$BIN_DIR/.helm.tmp" "$BIN_DIR/helm"
echo "$STAMP" > "$BIN_DIR/.helm.stamp"
t1=$(date +%s.%N)
printf '== helm built in %.1f s (%s)\n' "$(awk "BEGIN{print $t1-$t0}")" "$(du -h "$BIN_DIR/helm" | cut -f1)" >&2
echo "$BIN_DIR/helm"
