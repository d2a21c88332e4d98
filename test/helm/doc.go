// Package helm holds the tests of the Helm chart in deploy/helm/fenceline.
// They render it with the Helm library (no helm command needed) for its
// default values and a table of value sets, compare the default rendering
// with the kustomize bases in deploy/, and send every rendered object to a
// real kube-apiserver as a dry run. Its Installer installs the chart for
// real, for end-to-end tests that then run the product as installed.
package helm
