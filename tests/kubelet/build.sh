#!/usr/bin/env bash
# Build the node binaries of tests/kubelet and tests/e2e (the kubelet, containerd 2.x with its runc
# shim, ctr) from the Go module proxy into cache folders outside the repository:
#
#   ${ASCEND_DRA_CACHE:-$HOME/.cache/ascend-dra}/kubelet-<k8s version>/bin/kubelet (and kubectl for 1.37)
#   ${ASCEND_DRA_CACHE:-$HOME/.cache/ascend-dra}/containerd-<version>/bin/{containerd,containerd-shim-runc-v2,ctr}
#
# Only missing or out-of-date binaries are built (a .NAME.stamp per binary: version + hash of the
# wrapper module's go.mod/go.sum). The kubelet of Kubernetes MINOR (--k8s, default 1.35: tests/kubelet;
# tests/e2e uses 1.37) comes from go-kubelet-MINOR/, which pins the same k8s.io/kubernetes release and
# staging replaces as tests/cluster/go-k8s-MINOR/ (a module of its own so that the control-plane stamps
# of tests/cluster/build.sh do not change); it shares the Go build cache with the control plane. Every
# k8s.io/kubernetes/cmd/* its tools.go imports is built (1.37 adds kubectl). containerd comes from
# go-containerd/ with the snapshotters that need cgo or kernel features we do not use left out
# (no_btrfs no_devmapper no_zfs) and without tracing; CGO is off. runc is Debian's (make container-deps).
#
# Usage: tests/kubelet/build.sh [--k8s 1.37]                  build what is missing, print the two bin dirs last
#        tests/kubelet/build.sh [--k8s 1.37] --print-bin-dirs only print them (kubelet dir, then containerd dir)
#        tests/kubelet/build.sh [--k8s 1.37] --check          exit 1 if something is missing (build nothing)
#        tests/kubelet/build.sh [--k8s 1.37] --force          rebuild everything
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
K8S_MINOR=1.35
args=()
while (($#)); do
    case "$1" in
        --k8s) K8S_MINOR="${2:?build.sh: --k8s needs a minor version such as 1.37}"; shift 2 ;;
        --k8s=*) K8S_MINOR="${1#--k8s=}"; shift ;;
        *) args+=("$1"); shift ;;
    esac
done
set -- "${args[@]+"${args[@]}"}"
KUBELET_MOD="$HERE/go-kubelet-$K8S_MINOR"
if [[ ! -f "$KUBELET_MOD/go.mod" ]]; then
    echo "build.sh: Kubernetes $K8S_MINOR: no wrapper module $KUBELET_MOD (allowed:" \
         "$(cd "$HERE" && ls -d go-kubelet-*/ | sed 's,go-kubelet-,,; s,/,,' | tr '\n' ' '))" >&2
    exit 2
fi
CTRD_MOD="$HERE/go-containerd"
K8S_VERSION="$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$KUBELET_MOD/go.mod")"
CTRD_VERSION="$(awk '$1 == "require" && $2 == "github.com/containerd/containerd/v2" {print $3}' "$CTRD_MOD/go.mod")"
if [[ -z "$K8S_VERSION" || -z "$CTRD_VERSION" ]]; then
    echo "build.sh: cannot read the versions from $KUBELET_MOD/go.mod / $CTRD_MOD/go.mod" >&2
    exit 2
fi
CACHE_ROOT="${ASCEND_DRA_CACHE:-$HOME/.cache/ascend-dra}"
KUBELET_BIN="$CACHE_ROOT/kubelet-$K8S_VERSION/bin"
CTRD_BIN="$CACHE_ROOT/containerd-$CTRD_VERSION/bin"
CTRD_TAGS="no_btrfs no_devmapper no_zfs no_tracing"

mode=build
case "${1:-}" in
    "") ;;
    --print-bin-dirs) echo "$KUBELET_BIN"; echo "$CTRD_BIN"; exit 0 ;;
    --check) mode=check ;;
    --force) mode=force ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument $1" >&2; exit 2 ;;
esac

stamp_of() {  # $1 = module dir, $2 = version, $3 = build tags
    echo "$2 [$3] $(cat "$1/go.mod" "$1/go.sum" | sha256sum | cut -c1-16)"
}
KUBELET_STAMP="$(stamp_of "$KUBELET_MOD" "$K8S_VERSION" "")"
CTRD_STAMP="$(stamp_of "$CTRD_MOD" "$CTRD_VERSION" "$CTRD_TAGS")"

is_current() {  # $1 = bin dir, $2 = binary name, $3 = stamp
    [[ -x "$1/$2" && -f "$1/.$2.stamp" && "$(cat "$1/.$2.stamp")" == "$3" ]]
}

# name|bin dir|module dir|package|stamp
targets=()
for cmd in $(sed -n 's,^[[:space:]]*_ "k8s.io/kubernetes/cmd/\([a-z-]*\)"$,\1,p' "$KUBELET_MOD/tools.go"); do
    targets+=("$cmd|$KUBELET_BIN|$KUBELET_MOD|k8s.io/kubernetes/cmd/$cmd|$KUBELET_STAMP")
done
targets+=(
    "containerd|$CTRD_BIN|$CTRD_MOD|github.com/containerd/containerd/v2/cmd/containerd|$CTRD_STAMP"
    "containerd-shim-runc-v2|$CTRD_BIN|$CTRD_MOD|github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2|$CTRD_STAMP"
    "ctr|$CTRD_BIN|$CTRD_MOD|github.com/containerd/containerd/v2/cmd/ctr|$CTRD_STAMP"
)
missing=()
for t in "${targets[@]}"; do
    IFS='|' read -r name dir _ _ stamp <<<"$t"
    if [[ "$mode" == force ]] || ! is_current "$dir" "$name" "$stamp"; then missing+=("$t"); fi
done

if [[ "$mode" == check ]]; then
    if ((${#missing[@]})); then
        echo "missing: $(for t in "${missing[@]}"; do printf '%s ' "${t%%|*}"; done)"; exit 1
    fi
    echo "$KUBELET_BIN"; echo "$CTRD_BIN"; exit 0
fi
if ((${#missing[@]} == 0)); then
    echo "all node binaries present"; echo "$KUBELET_BIN"; echo "$CTRD_BIN"; exit 0
fi

GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
if [[ ! -x "$GO" ]]; then
    echo "build.sh: no Go toolchain (need Go >= 1.25 on PATH or in /usr/local/go)" >&2; exit 1
fi
mkdir -p "$KUBELET_BIN" "$CTRD_BIN"
exec 9>"$CACHE_ROOT/.node-build.lock"
if ! flock -n 9; then echo "== another tests/kubelet/build.sh holds the lock, waiting ..."; flock 9; fi

export CGO_ENABLED=0
k8s_minor="$(echo "$K8S_VERSION" | cut -d. -f2)"
KUBE_LDF=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    KUBE_LDF+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$k8s_minor"
    KUBE_LDF+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
done
CTRD_LDF="-X github.com/containerd/containerd/v2/version.Version=$CTRD_VERSION"

total0=$(date +%s.%N)
for t in "${missing[@]}"; do
    IFS='|' read -r name dir mod pkg stamp <<<"$t"
    if [[ "$mode" != force ]] && is_current "$dir" "$name" "$stamp"; then
        echo "== $name: built meanwhile by another process"; continue
    fi
    if [[ "$mod" == "$KUBELET_MOD" ]]; then flags=(-ldflags "$KUBE_LDF -s -w")
    else flags=(-tags "$CTRD_TAGS" -ldflags "$CTRD_LDF -s -w"); fi
    echo "== building $name ($pkg) ..."
    t0=$(date +%s.%N)
    (cd "$mod" && "$GO" build -mod=readonly -trimpath "${flags[@]}" -o "$dir/.$name.tmp" "$pkg")
    mv -f "$dir/.$name.tmp" "$dir/$name"
    echo "$stamp" > "$dir/.$name.stamp"
    printf '== %s built in %.1f s (%s)\n' "$name" "$(awk "BEGIN{print $(date +%s.%N)-$t0}")" \
        "$(du -h "$dir/$name" | cut -f1)"
done
printf '== total build time %.1f s\n' "$(awk "BEGIN{print $(date +%s.%N)-$total0}")"
echo "$KUBELET_BIN"
echo "$CTRD_BIN"
