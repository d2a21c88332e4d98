// Package deploy holds the tests of the deploy/ manifests, the Dockerfile and
// the image build context. They render every kustomization with kubectl,
// apply every manifest to a real kube-apiserver with --dry-run=server, check
// the deploy's RBAC against what the components need, and validate the
// Dockerfile statically (no container engine is needed).
package deploy
