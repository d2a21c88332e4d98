// Package fencingapi checks the fencing API (api/fencing/v1alpha1) against a
// real kube-apiserver: the generated CRDs install and become Established,
// the generated clientset, apply configurations, informers and listers
// work, defaults are applied, and the CEL rules reject what they should
// with the message users will see.
package fencingapi
