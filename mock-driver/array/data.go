package array

import "google.golang.org/grpc/codes"

// Write decides a data-plane write to the volume from node. The
// mock keeps no data: the audit log records each accepted or refused write,
// which is what tests assert on. A write from a node in a fenced network
// is refused with PermissionDenied, the code of every fence refusal on the
// data path (a writer takes FailedPrecondition for "the volume went away"
// and stops, while a fenced writer goes on trying).
func (a *Array) Write(node, volID string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, err := volume(a.state, volID)
	if err != nil {
		return err
	}
	if err := a.checkNetworkAccess(node, codes.PermissionDenied); err != nil {
		return err
	}
	return checkWrite(v, node)
}
