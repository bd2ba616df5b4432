//go:build tools

// Package tools pins the kubelet and kubectl commands so that `go mod tidy`
// keeps their dependencies in go.mod / go.sum. kubectl is for the test bed of
// tests/e2e (make e2e-up prints a KUBECONFIG for it; hack/webhook-certs.sh).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
