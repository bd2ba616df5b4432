#!/usr/bin/env bash
# cert-manager's CustomResourceDefinitions (Issuer, ClusterIssuer, Certificate, CertificateRequest),
# taken from its Go module through the Go module proxy (the module's deploy/crds/), for the cluster
# tests: the chart's and deployments/webhook's certManager objects are sent to the API server under
# cert-manager's own schemas. cert-manager's controller and CA injector are not run: their main
# packages are Go modules of their own (cmd/controller, cmd/cainjector, with `replace` directives)
# that the module proxy does not serve.
#
#   ${ASCEND_DRA_CACHE:-$HOME/.cache/ascend-dra}/cert-manager-crds-<version>/*.yaml
#
# Usage: hack/fetch-cert-manager-crds.sh            fetch if missing, print the directory
#        hack/fetch-cert-manager-crds.sh --print    only print the directory
set -euo pipefail

VERSION=v1.21.2
DIR="${ASCEND_DRA_CACHE:-$HOME/.cache/ascend-dra}/cert-manager-crds-$VERSION"
case "${1:-}" in
    "") ;;
    --print) echo "$DIR"; exit 0 ;;
    *) echo "fetch-cert-manager-crds.sh: unknown argument $1" >&2; exit 2 ;;
esac
if [[ -f "$DIR/.complete" ]]; then echo "$DIR"; exit 0; fi

GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
[[ -x "$GO" ]] || { echo "fetch-cert-manager-crds.sh: no Go toolchain (need Go on PATH or in /usr/local/go)" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# Outside any module, `go mod download` fetches one module into GOMODCACHE and says where it is.
info="$(cd "$work" && GOFLAGS=-mod=mod "$GO" mod download -json "github.com/cert-manager/cert-manager@$VERSION")"
src="$(printf '%s' "$info" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[[ -d "$src/deploy/crds" ]] || { echo "fetch-cert-manager-crds.sh: no deploy/crds in cert-manager $VERSION: $info" >&2; exit 1; }
mkdir -p "$work/crds"
cp "$src"/deploy/crds/cert-manager.io_*.yaml "$work/crds/"
rm -rf "$DIR"
mkdir -p "$(dirname "$DIR")"
touch "$work/crds/.complete"
mv "$work/crds" "$DIR"
echo "$DIR"
