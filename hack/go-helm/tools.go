//go:build tools

// Package tools pins helm's command package, so that `go mod tidy` keeps what
// `go build helm.sh/helm/v3/cmd/helm` needs.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
