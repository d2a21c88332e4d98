package fencing

// AheadInput is what RecordAhead looks at, for a VolumeAttachment whose
// detach may not have been asked for yet.
type AheadInput struct {
	// Deleting is true once the VolumeAttachment is being deleted: its
	// detach then writes the record itself, before its first call.
	Deleting bool
	// OurFinalizer is true while the attacher's finalizer is on the
	// VolumeAttachment: a ControllerUnpublishVolume of ours is still to
	// come. Without it there is no detach to record.
	OurFinalizer bool
	// Intent is the fence intent a controller saved on the VolumeAttachment,
	// nil when there is none.
	Intent *Record
	// Decision is Decide's on the VolumeAttachment's inputs now.
	Decision Decision
}

// RecordAhead states when fenceline-attacher writes its fence record on a
// VolumeAttachment before its detach is asked for: a controller's fence
// intent is on it, which makes every detach of it fenced whatever the node
// does next (Decide); the attacher's finalizer is on it; it is not being
// deleted yet; and Decide, on the inputs of now, says fenced and not yet
// recorded (a driver that cannot fence gets no record).
//
// The record is the very one the detach would write before its first
// ControllerUnpublishVolume, and it binds no more than the intent already
// does. Written while the pods are still being deleted, it takes one API
// round trip off the failover: the detach finds it and calls the driver at
// once. Without an intent nothing is recorded ahead: a node's condition can
// still change before the detach, and only the detach decides on it.
func RecordAhead(in AheadInput) bool {
	return !in.Deleting && in.OurFinalizer && in.Intent != nil &&
		in.Decision.Action == ActionFenced && in.Decision.WriteRecord
}
