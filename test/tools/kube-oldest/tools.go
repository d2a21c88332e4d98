//go:build tools

// Package tools pins the control-plane binaries of the oldest Kubernetes
// minor Fenceline supports (see docs/compatibility.md); `make e2e-oldest`
// builds them and runs the end-to-end suite against them. It is never
// imported; `go build` builds the commands named below at the versions
// required in go.mod.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
