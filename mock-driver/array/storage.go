package array

// Storage is a data path behind the array's bookkeeping: real storage that
// carries out what the array decided, for backends other than the memory
// one (which has none: Options.Storage nil). The array keeps every rule;
// Storage only acts, under the array's lock, between the decision and the
// commit, so a failed action leaves the state unchanged and a retry does it
// again. Every method must be idempotent and return a gRPC status error.
type Storage interface {
	// CreateVolume provides a volume of size bytes.
	CreateVolume(volID string, size int64) error
	// DeleteVolume removes a volume; an unknown one is success.
	DeleteVolume(volID string) error
	// Grant lets node reach the volume and returns what the node needs to
	// find it, added to the publish context.
	Grant(volID, node string) (map[string]string, error)
	// Revoke is a plain unpublish: node may no longer reach the volume
	// anew; what it holds already is left alone, as a real array does.
	Revoke(volID, node string) error
	// Fence cuts node off the volume, live sessions included, and returns
	// nil only once that is in effect.
	Fence(volID, node string) error
}

// storageCut is what the data path does to one node at ControllerUnpublish.
type storageCut int

const (
	cutNone storageCut = iota
	cutRevoke
	cutFence
)

// decideStorageCut says what the data path must do for node given the
// array's decision act. A fence the array honours is always carried out on
// the storage, even where the bookkeeping has nothing left to change (a
// repeat after a lost answer, a node that already cleaned up): a fence of a
// node that holds nothing costs nothing, and skipping one that holds a
// session would leave a writer behind the array's back.
func decideStorageCut(act unpublishAction, fence bool, sem Semantics) storageCut {
	switch {
	case fence && sem.Fence:
		return cutFence
	case act == unpublishDetach || act == unpublishUnsafe || act == unpublishFence:
		return cutRevoke
	}
	return cutNone
}
