package audit

import "slices"

// Predicate selects audit records.
type Predicate func(Record) bool

// Method selects records of the given RPC name.
func Method(name string) Predicate { return func(r Record) bool { return r.Method == name } }

// Node selects records about the given node.
func Node(id string) Predicate { return func(r Record) bool { return r.NodeID == id } }

// Volume selects records about the given volume.
func Volume(id string) Predicate { return func(r Record) bool { return r.VolumeID == id } }

// Code selects records answered with the given gRPC code name ("OK",
// "PermissionDenied", ...).
func Code(name string) Predicate { return func(r Record) bool { return r.Code == name } }

// OK selects successful calls (accepted writes, for Method("Write")).
func OK() Predicate { return Code("OK") }

// Effective selects calls that took effect on the array: successful ones
// and those whose answer was lost after the array carried them out
// (Record.Applied). What the CO saw is in Code; what the array did is this.
func Effective() Predicate { return func(r Record) bool { return r.Code == "OK" || r.Applied } }

// Fenced selects calls that carried fence=true.
func Fenced() Predicate { return func(r Record) bool { return r.Fence } }

// Forced selects calls that carried force=true.
func Forced() Predicate { return func(r Record) bool { return r.Force } }

// All selects records matching every predicate.
func All(preds ...Predicate) Predicate {
	return func(r Record) bool {
		for _, p := range preds {
			if !p(r) {
				return false
			}
		}
		return true
	}
}

// Filter returns the records matching every predicate, in log order.
func Filter(recs []Record, preds ...Predicate) []Record {
	match := All(preds...)
	var out []Record
	for _, r := range recs {
		if match(r) {
			out = append(out, r)
		}
	}
	return out
}

// FirstIndex returns the index of the first record matching every
// predicate, or -1.
func FirstIndex(recs []Record, preds ...Predicate) int {
	return slices.IndexFunc(recs, All(preds...))
}

// LastIndex returns the index of the last record matching every predicate,
// or -1.
func LastIndex(recs []Record, preds ...Predicate) int {
	match := All(preds...)
	for i := len(recs) - 1; i >= 0; i-- {
		if match(recs[i]) {
			return i
		}
	}
	return -1
}

// Count returns how many records match every predicate.
func Count(recs []Record, preds ...Predicate) int {
	return len(Filter(recs, preds...))
}
