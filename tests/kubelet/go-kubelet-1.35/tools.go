//go:build tools

// Package tools pins the kubelet command so that `go mod tidy` keeps its
// dependencies in go.mod / go.sum.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kubelet"
)
