package array

import (
	"maps"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The node-side methods take the I/O to perform (creating or removing the
// paths) as a callback, run under the array's lock between the decision and
// the commit, so that what is on disk and what the array records move
// together.

// NodeStage records that node staged the volume at path after running
// mount. Staging again at the same path is an idempotent success.
func (a *Array) NodeStage(node, volID, path string, mode Mode, mount func() error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, err := volume(a.state, volID)
	if err != nil {
		return err
	}
	if err := a.checkNetworkAccess(node, codes.FailedPrecondition); err != nil {
		return err
	}
	if err := checkNodeAccess(v, node, a.opts.Semantics); err != nil {
		return err
	}
	if u := v.Nodes[node]; u != nil && u.StagingPath != "" {
		if u.StagingPath != path {
			return status.Errorf(codes.FailedPrecondition, "volume %s is already staged on node %s at %q", volID, node, u.StagingPath)
		}
		return mount()
	}
	if err := mount(); err != nil {
		return err
	}
	return a.update(func(s *State) {
		u := nodeUse(s.Volumes[volID], node)
		u.StagingPath = path
		u.AccessMode = mode
	})
}

// NodeUnstage removes the staging record after running unmount, which gets
// the target paths to remove too (non-empty only for a forced unstage of a
// volume still published). An unforced unstage of a volume still published
// on the node is refused.
func (a *Array) NodeUnstage(node, volID, path string, force bool, unmount func(targets []string) error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, err := volume(a.state, volID)
	if err != nil {
		return err
	}
	force = cleanupForce(force, a.opts.Semantics)
	u := v.Nodes[node]
	staged := u != nil && u.StagingPath == path
	var targets []string
	if staged {
		targets = slices.Sorted(maps.Keys(u.Targets))
		if len(targets) > 0 && !force {
			return status.Errorf(codes.FailedPrecondition, "volume %s is still published on node %s at %q", volID, node, targets)
		}
	}
	if err := unmount(targets); err != nil {
		return err
	}
	_, fenced := v.Fenced[node]
	if !staged && !(fenced && !u.InUse()) {
		return nil
	}
	return a.update(func(s *State) {
		nv := s.Volumes[volID]
		if staged {
			delete(nv.Nodes, node)
		}
		liftQuarantine(nv, node)
	})
}

// NodePublish records a published target after running mount.
func (a *Array) NodePublish(node, volID, target, staging string, mode Mode, readOnly bool, mount func() error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, err := volume(a.state, volID)
	if err != nil {
		return err
	}
	if err := a.checkNetworkAccess(node, codes.FailedPrecondition); err != nil {
		return err
	}
	if err := checkNotFenced(v, node); err != nil {
		return err
	}
	already, err := checkNodePublishTarget(v, node, target, staging, mode, readOnly)
	if err != nil {
		return err
	}
	if err := mount(); err != nil {
		return err
	}
	if already {
		return nil
	}
	return a.update(func(s *State) {
		u := nodeUse(s.Volumes[volID], node)
		if u.Targets == nil {
			u.Targets = map[string]*Target{}
		}
		u.Targets[target] = &Target{ReadOnly: readOnly}
	})
}

// NodeUnpublish removes a published target after running unmount. It runs
// unmount even when the array has no record of the target, so a retried
// clean-up always leaves the path removed. force changes nothing here: an
// unpublish never needs it, and on a fenced volume any clean-up counts.
func (a *Array) NodeUnpublish(node, volID, target string, _ bool, unmount func() error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, err := volume(a.state, volID)
	if err != nil {
		return err
	}
	if err := unmount(); err != nil {
		return err
	}
	u := v.Nodes[node]
	_, published := u.targets()[target]
	_, fenced := v.Fenced[node]
	if !published && !fenced {
		return nil
	}
	return a.update(func(s *State) {
		nv := s.Volumes[volID]
		if nu := nv.Nodes[node]; nu != nil {
			delete(nu.Targets, target)
			if !nu.InUse() {
				delete(nv.Nodes, node)
			}
		}
		liftQuarantine(nv, node)
	})
}

// NodeVolumePath checks that node has the volume staged or published at
// path, for NodeGetVolumeStats, and returns the volume.
func (a *Array) NodeVolumePath(node, volID, path string) (*Volume, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, err := volume(a.state, volID)
	if err != nil {
		return nil, err
	}
	u := v.Nodes[node]
	if _, ok := u.targets()[path]; ok || (u != nil && u.StagingPath == path) {
		return v.Clone(), nil
	}
	return nil, status.Errorf(codes.NotFound, "volume %s is not staged or published at %q on node %s", volID, path, node)
}

// liftQuarantine ends node's quarantine on v once a clean-up, forced or
// not, left it holding nothing (see cleanupForce).
func liftQuarantine(v *Volume, node string) {
	if !v.Nodes[node].InUse() {
		delete(v.Fenced, node)
	}
}

func nodeUse(v *Volume, node string) *NodeUse {
	if v.Nodes == nil {
		v.Nodes = map[string]*NodeUse{}
	}
	u := v.Nodes[node]
	if u == nil {
		u = &NodeUse{}
		v.Nodes[node] = u
	}
	return u
}

func (u *NodeUse) targets() map[string]*Target {
	if u == nil {
		return nil
	}
	return u.Targets
}
