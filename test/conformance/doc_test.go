// Package conformance runs upstream Kubernetes' own e2e specs against the
// local control plane with the product on it, to hold a Fenceline
// controller that replaces one of kube-controller-manager's to upstream's
// own tests. The specs come from a test binary of upstream's test/e2e/node,
// built from the module proxy at the pinned version (`make upstream-e2e`,
// from test/tools/e2e).
//
// TestNoExecuteTaintManager runs the [sig-node] NoExecuteTaintManager specs
// against kube-controller-manager's taint-eviction-controller, which proves
// the harness, and against fenceline-controller's taint-eviction
// (FENCELINE_TAINT_EVICTION selects). The tests skip under -short.
package conformance
