// Package kubectlplugin runs the kubectl-fenceline binary against a real
// kube-apiserver with the fencing CRDs installed, on nodes, taints,
// conditions, VolumeAttachments, FencingRequests and Events written for
// it, and compares its output with golden files (go test -update
// rewrites them).
package kubectlplugin
