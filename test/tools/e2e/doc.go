// Package e2e builds a test binary of upstream Kubernetes' own node e2e
// tests (k8s.io/kubernetes/test/e2e/node, at the version pinned in go.mod)
// with the e2e framework and nothing else of test/e2e, so that the local
// control plane can run upstream's [sig-node] NoExecuteTaintManager specs
// against kube-controller-manager's taint-eviction-controller or against a
// replacement (see test/conformance). It is never imported; `go test -c`
// builds the binary from e2e_test.go.
package e2e
