// Package bench holds Fenceline's benchmarks against upstream, run by
// `make bench` on the local real control plane (see test/cluster):
//
//   - BenchmarkFailover: a StatefulSet whose pods each own an RWO volume
//     loses the node holding a third of them; upstream (kube-controller-manager
//     plus external-attacher) against Fenceline (fenceline-attacher plus
//     fenceline-controller), over several repetitions.
//   - BenchmarkAttachThroughput: N VolumeAttachments attached and then
//     detached by each attacher, with the mock driver answering at once and
//     with a fixed latency, counting the API requests each attach costs.
//
// The benchmarks print one table each and write it as JSON under
// bench-results/. Their timings are reported, never asserted: the machine
// they run on decides the figures. This file's package holds the pure
// summary and table helpers; the benchmarks themselves live in _test.go
// files so that no production code depends on them.
package bench
