package fencing

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// FencedByAbsence reports whether a ControllerUnpublishVolume that failed
// with err still completed the detach. Only a fenced one can: the fence
// extension's contract says that a driver answers NOT_FOUND to a fenced
// unpublish when the array does not know the node ID (or the volume), and a
// node ID the array does not know holds no access to anything, so the node
// is fenced by absence. This is the case of a node re-installed with a new
// CSI node ID: the fence targets the old ID, the one that was published,
// and retrying would never succeed.
//
// A plain unpublish that fails with NOT_FOUND is retried, exactly as the
// upstream external-attacher does: without the extension's promise, the
// error says nothing about the node's access.
func FencedByAbsence(fenced bool, err error) bool {
	if !fenced || err == nil {
		return false
	}
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.NotFound
}
