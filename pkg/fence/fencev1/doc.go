// Package fencev1 is the Go code generated from
// api/fence/v1/fenceline_fence.proto, the wire contract of the Fenceline CSI
// fence extension (protobuf package fenceline.fence.v1). Regenerate it with
// `make generate`; a test fails when it is out of date.
//
// Most code should use package fenceline.io/fenceline/pkg/fence instead,
// which wraps these types for drivers and container orchestrators.
package fencev1
