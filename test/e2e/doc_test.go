// Package e2e holds the end-to-end scenarios: the whole product (mock
// driver, kubelet stand-ins, fenceline-attacher, fenceline-controller) on a
// real local control plane. They skip under -short.
package e2e
