// Package sanitysplit holds only a test: csi-sanity against the mock driver
// laid out as in the end-to-end tests, with the controller and the node
// plugin on separate sockets of one array. It is a package of its own
// because csi-test's Ginkgo suite can run only once per test binary.
package sanitysplit
