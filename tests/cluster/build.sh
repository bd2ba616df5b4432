#!/usr/bin/env bash
# Build the binaries of the test control plane (kube-apiserver, kube-controller-manager,
# kube-scheduler, etcd) from the Go module proxy into a cache folder outside the repository:
#
#   ${ASCEND_DRA_CACHE:-$HOME/.cache/ascend-dra}/controlplane-<k8s version>/bin/
#
# Only missing (or out-of-date, see the .stamp files) binaries are built, so a fresh clone on
# the same machine reuses them. GOMODCACHE / GOCACHE stay at Go's defaults and are shared by
# every Kubernetes version (a second version reuses the packages whose versions match).
#
# The Kubernetes minor version is chosen with --k8s MINOR or $ASCEND_DRA_K8S (default 1.35);
# each minor has its wrapper module go-k8s-<minor>/ (pinned patch release in its go.mod).
#
# Usage: tests/cluster/build.sh [--k8s 1.37]             build what is missing, print the bin dir last
#        tests/cluster/build.sh [--k8s 1.37] --print-bin-dir   only print the bin dir
#        tests/cluster/build.sh [--k8s 1.37] --check     exit 1 if something is missing (build nothing)
#        tests/cluster/build.sh [--k8s 1.37] --force     rebuild everything
#        tests/cluster/build.sh --list                   print the minors that have a wrapper module
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ETCD_MOD="$HERE/go-etcd"

K8S_MINOR="${ASCEND_DRA_K8S:-1.35}"
args=()
while (($#)); do
    case "$1" in
        --k8s) K8S_MINOR="${2:?build.sh: --k8s needs a minor version such as 1.37}"; shift 2 ;;
        --k8s=*) K8S_MINOR="${1#--k8s=}"; shift ;;
        --list) for d in "$HERE"/go-k8s-*/; do d="${d%/}"; echo "${d##*/go-k8s-}"; done; exit 0 ;;
        *) args+=("$1"); shift ;;
    esac
done
set -- "${args[@]+"${args[@]}"}"
K8S_MOD="$HERE/go-k8s-$K8S_MINOR"
if [[ ! -f "$K8S_MOD/go.mod" ]]; then
    echo "build.sh: Kubernetes $K8S_MINOR: no wrapper module $K8S_MOD (allowed: $("$0" --list | tr '\n' ' '))" >&2
    exit 2
fi

K8S_VERSION="$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$K8S_MOD/go.mod")"
ETCD_VERSION="$(awk '$1 == "require" && $2 == "go.etcd.io/etcd/server/v3" {print $3}' "$ETCD_MOD/go.mod")"
if [[ -z "$K8S_VERSION" || -z "$ETCD_VERSION" ]]; then
    echo "build.sh: cannot read the versions from $K8S_MOD/go.mod / $ETCD_MOD/go.mod" >&2
    exit 2
fi

CACHE_ROOT="${ASCEND_DRA_CACHE:-$HOME/.cache/ascend-dra}"
BIN_DIR="$CACHE_ROOT/controlplane-$K8S_VERSION/bin"
K8S_BINARIES=(kube-apiserver kube-controller-manager kube-scheduler)

mode=build
case "${1:-}" in
    "") ;;
    --print-bin-dir) echo "$BIN_DIR"; exit 0 ;;
    --check) mode=check ;;
    --force) mode=force ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument $1" >&2; exit 2 ;;
esac

# A stamp per binary: version + hash of the wrapper module's go.mod/go.sum. A binary whose
# stamp does not match (e.g. etcd bumped in go-etcd/go.mod) counts as missing.
stamp_of() {  # $1 = module dir, $2 = version
    echo "$2 $(cat "$1/go.mod" "$1/go.sum" | sha256sum | cut -c1-16)"
}
K8S_STAMP="$(stamp_of "$K8S_MOD" "$K8S_VERSION")"
ETCD_STAMP="$(stamp_of "$ETCD_MOD" "$ETCD_VERSION")"

is_current() {  # $1 = binary name, $2 = stamp
    [[ -x "$BIN_DIR/$1" && -f "$BIN_DIR/.$1.stamp" && "$(cat "$BIN_DIR/.$1.stamp")" == "$2" ]]
}

missing=()
for b in "${K8S_BINARIES[@]}"; do
    if [[ "$mode" == force ]] || ! is_current "$b" "$K8S_STAMP"; then missing+=("$b"); fi
done
if [[ "$mode" == force ]] || ! is_current etcd "$ETCD_STAMP"; then missing+=(etcd); fi

if [[ "$mode" == check ]]; then
    if ((${#missing[@]})); then echo "missing: ${missing[*]} (in $BIN_DIR)"; exit 1; fi
    echo "$BIN_DIR"; exit 0
fi

# Runtime tools the control plane needs (openssl for certificates/keys). Installed only when
# absent, so a machine that has them never touches apt.
need_pkgs=()
command -v openssl >/dev/null || need_pkgs+=(openssl)
command -v flock >/dev/null || need_pkgs+=(util-linux)
if ((${#need_pkgs[@]})); then
    if [[ $(id -u) -ne 0 ]] && ! command -v sudo >/dev/null; then
        echo "build.sh: please install ${need_pkgs[*]}" >&2; exit 1
    fi
    SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
    echo "== apt-get install ${need_pkgs[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}"
fi

if ((${#missing[@]} == 0)); then
    echo "all control-plane binaries present in $BIN_DIR"
    echo "$BIN_DIR"
    exit 0
fi

# Go >= 1.21 (go.mod says `go 1.25.0`; an older >= 1.21 toolchain fetches the right one itself
# through GOTOOLCHAIN=auto from the module proxy).
GO="${GO:-}"
if [[ -z "$GO" ]]; then
    if command -v go >/dev/null; then GO="$(command -v go)"
    elif [[ -x /usr/local/go/bin/go ]]; then GO=/usr/local/go/bin/go
    else
        echo "build.sh: no Go toolchain found (need Go >= 1.21 on PATH or in /usr/local/go;" \
             "Debian's golang-go 1.19 is too old). Install it from https://go.dev/dl/." >&2
        exit 1
    fi
fi
go_minor="$("$GO" env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')"
if [[ ! "$go_minor" =~ ^[0-9]+$ ]] || ((go_minor < 21)); then
    echo "build.sh: $GO is $("$GO" env GOVERSION); need Go >= 1.21 (1.25+ preferred)" >&2
    exit 1
fi

mkdir -p "$BIN_DIR"
# Serialise concurrent builds (e.g. two pytest sessions) on the same cache folder.
exec 9>"$BIN_DIR/../.build.lock"
if ! flock -n 9; then
    echo "== another build.sh holds $BIN_DIR/../.build.lock, waiting ..."
    flock 9
fi

export CGO_ENABLED=0
BUILD_DATE="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
k8s_minor="$(echo "$K8S_VERSION" | cut -d. -f2)"
LDF=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    LDF+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$k8s_minor"
    LDF+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$BUILD_DATE"
done
LDF+=" -s -w"

build_one() {  # $1 = name, $2 = module dir, $3 = package, $4 = ldflags, $5 = stamp
    local name="$1" dir="$2" pkg="$3" ldf="$4" stamp="$5" t0 t1
    # Re-check under the lock: a concurrent build may have produced it meanwhile.
    if [[ "$mode" != force ]] && is_current "$name" "$stamp"; then
        echo "== $name: built meanwhile by another process"; return 0
    fi
    echo "== building $name ($pkg) ..."
    t0=$(date +%s.%N)
    (cd "$dir" && "$GO" build -mod=readonly -trimpath -ldflags "$ldf" -o "$BIN_DIR/.$name.tmp" "$pkg")
    mv -f "$BIN_DIR/.$name.tmp" "$BIN_DIR/$name"
    echo "$stamp" > "$BIN_DIR/.$name.stamp"
    t1=$(date +%s.%N)
    printf '== %s built in %.1f s (%s)\n' "$name" "$(awk "BEGIN{print $t1-$t0}")" \
        "$(du -h "$BIN_DIR/$name" | cut -f1)"
}

# etcd does not depend on the Kubernetes version: take a current one from another version's
# bin dir (hard link, else copy) instead of building it again.
reuse_etcd() {
    [[ "$mode" == force ]] && return 1
    local other
    for other in "$CACHE_ROOT"/controlplane-*/bin; do
        [[ "$other" == "$BIN_DIR" || ! -x "$other/etcd" ]] && continue
        [[ "$(cat "$other/.etcd.stamp" 2>/dev/null)" == "$ETCD_STAMP" ]] || continue
        ln -f "$other/etcd" "$BIN_DIR/.etcd.tmp" 2>/dev/null || cp -f "$other/etcd" "$BIN_DIR/.etcd.tmp"
        mv -f "$BIN_DIR/.etcd.tmp" "$BIN_DIR/etcd"
        echo "$ETCD_STAMP" > "$BIN_DIR/.etcd.stamp"
        echo "== etcd: reused from $other"
        return 0
    done
    return 1
}

total0=$(date +%s.%N)
for b in "${missing[@]}"; do
    case "$b" in
        etcd) reuse_etcd || build_one etcd "$ETCD_MOD" . "-s -w" "$ETCD_STAMP" ;;
        *) build_one "$b" "$K8S_MOD" "k8s.io/kubernetes/cmd/$b" "$LDF" "$K8S_STAMP" ;;
    esac
done
total1=$(date +%s.%N)
printf '== total build time %.1f s; bin dir %s (%s)\n' "$(awk "BEGIN{print $total1-$total0}")" \
    "$BIN_DIR" "$(du -sh "$BIN_DIR" | cut -f1)"
echo "$BIN_DIR"
