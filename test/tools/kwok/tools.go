//go:build tools

// Package tools pins KWOK, which simulates the kubelets of the local test
// cluster's nodes.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
	_ "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat-with-lease"
	_ "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
)
