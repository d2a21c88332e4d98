// Package bench holds Fenceline's benchmarks against upstream, run by
// `make bench` on the local real control plane (see test/cluster):
//
//   - BenchmarkFailover: a StatefulSet whose pods each own an RWO volume
//     loses the node holding a third of them; upstream (kube-controller-manager
//     plus external-attacher) against Fenceline (fenceline-attacher plus
//     fenceline-controller), over several repetitions.
//   - BenchmarkFailoverNoHuman: the same node loss with nobody acting, at
//     production-default timings (40 s kubelet Lease, kube-controller-manager
//     defaults, Fenceline's shipped FencePolicy and FenceClass): the node
//     stops heartbeating, node-fencing has it powered off through its BMC,
//     measured until every replacement runs attached, each detach fenced.
//     BenchmarkFailoverNoHumanPowerLoss: the node loses its power instead
//     (its BMC reads Off), seen at its first missed Lease renewal through a
//     read of its BMC (detection.powerCheck).
//     BenchmarkFailoverNoHumanUpstream watches upstream at the same timings
//     (one long run, off unless FENCELINE_BENCH_UPSTREAM_WATCH is set).
//   - BenchmarkAttachThroughput: N VolumeAttachments attached and then
//     detached by each attacher, with the mock driver answering at once and
//     with a fixed latency, counting the API requests each attach costs.
//   - BenchmarkScale (`make bench-scale`, not part of `make bench`):
//     clusters from 500 nodes and 1,000 pods to 5,000 nodes and 50,000
//     pods; at rest, the CPU, memory and API requests of
//     fenceline-controller and fenceline-attacher; then a node holding 100
//     pods with RWO volumes loses power and gets the out-of-service taint,
//     timed until its pods are deleted and every volume is fenced.
//
// The benchmarks print one table each and write it as JSON under
// bench-results/. Their timings are reported, never asserted: the machine
// they run on decides the figures. This file's package holds the pure
// summary and table helpers; the benchmarks themselves live in _test.go
// files so that no production code depends on them.
package bench
