package tgt

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"fenceline.io/fenceline/mock-driver/array"
)

var _ array.Storage = (*Backend)(nil)

// The array lists the backend's description with its fences.
var _ array.FenceDescriber = (*Backend)(nil)

// lunPath is the sparse file backing a volume.
func (b *Backend) lunPath(volID string) string {
	return filepath.Join(b.opts.Dir, "luns", volID+".img")
}

// unavailable is the error of a tgtd that did not do what it was asked:
// the array answers it, and the CO retries.
func unavailable(format string, args ...any) error {
	return status.Errorf(codes.Unavailable, "tgt backend: "+format, args...)
}

// CreateVolume creates the volume's sparse file and its target with the
// file as LUN 1. The target admits nobody until Grant.
func (b *Backend) CreateVolume(volID string, size int64) error {
	name, err := TargetName(volID)
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	ctx := context.Background()
	t, err := b.admin.target(ctx, name)
	if err != nil {
		return unavailable("read targets: %v", err)
	}
	if t != nil {
		b.tids[volID] = t.TID
		return b.reserve(t)
	}
	f, err := os.OpenFile(b.lunPath(volID), os.O_CREATE|os.O_RDWR, 0o640)
	if err != nil {
		return status.Errorf(codes.Internal, "tgt backend: create LUN file: %v", err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return status.Errorf(codes.Internal, "tgt backend: size LUN file: %v", err)
	}
	tid := strconv.Itoa(b.nextTID)
	if _, err := b.admin.run(ctx, "--mode", "target", "--op", "new", "--tid", tid, "--targetname", name); err != nil {
		return unavailable("create target %s: %v", name, err)
	}
	b.tids[volID] = b.nextTID
	b.nextTID++
	if _, err := b.admin.run(ctx, "--mode", "logicalunit", "--op", "new", "--tid", tid, "--lun", strconv.Itoa(LUN), "--backing-store", b.lunPath(volID)); err != nil {
		return unavailable("add LUN to target %s: %v", name, err)
	}
	t, err = b.admin.target(ctx, name)
	if err != nil || t == nil {
		return unavailable("read the new target %s: %v", name, err)
	}
	return b.reserve(t)
}

// DeleteVolume deletes the target (ending its sessions) and its file.
func (b *Backend) DeleteVolume(volID string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, err := b.lookup(volID)
	if err != nil {
		return err
	}
	if t != nil {
		b.dropControllerSession(t.Name)
		if _, err := b.admin.run(context.Background(), "--mode", "target", "--op", "delete", "--force", "--tid", strconv.Itoa(t.TID)); err != nil {
			return unavailable("delete target %s: %v", t.Name, err)
		}
	}
	delete(b.tids, volID)
	if err := os.Remove(b.lunPath(volID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return status.Errorf(codes.Internal, "tgt backend: remove LUN file: %v", err)
	}
	return nil
}

// lookup reads the volume's target from tgtd: nil if it has none.
func (b *Backend) lookup(volID string) (*Target, error) {
	name, err := TargetName(volID)
	if err != nil {
		return nil, nil // never created: no target can have this name
	}
	t, err := b.admin.target(context.Background(), name)
	if err != nil {
		return nil, unavailable("read targets: %v", err)
	}
	return t, nil
}

// Grant adds the node's initiator to the volume's ACL, confirms it on a
// fresh listing and returns where and as whom to log in.
func (b *Backend) Grant(volID, node string) (map[string]string, error) {
	initiator, err := InitiatorName(node)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t, err := b.lookup(volID)
	if err != nil {
		return nil, err
	}
	if t == nil {
		return nil, unavailable("volume %s has no target on tgtd", volID)
	}
	if !t.Allowed(initiator) {
		_, err := b.admin.run(context.Background(), "--mode", "target", "--op", "bind", "--tid", strconv.Itoa(t.TID), "--initiator-name", initiator)
		if err != nil && !isAdminError(err, "already exists") {
			return nil, unavailable("grant %s on target %s: %v", initiator, t.Name, err)
		}
		if t, err = b.lookup(volID); err != nil {
			return nil, err
		}
	}
	if err := CheckGrant(t, initiator); err != nil {
		return nil, unavailable("grant not in effect: %v", err)
	}
	pc := map[string]string{
		PublishContextPortal:    b.portal,
		PublishContextTarget:    t.Name,
		PublishContextLUN:       strconv.Itoa(LUN),
		PublishContextInitiator: initiator,
	}
	if b.opts.Method == MethodPR {
		pc[PublishContextReservationKey] = strconv.FormatUint(ReservationKey(node), 16)
	}
	return pc, nil
}

// Revoke removes the node's initiator from the ACL; its sessions stay.
func (b *Backend) Revoke(volID, node string) error {
	return b.cut(volID, node, CutRevoke)
}

// Fence cuts the node off as the fence method says and returns nil only
// once a fresh listing confirms it (CheckCut).
func (b *Backend) Fence(volID, node string) error {
	return b.cut(volID, node, CutFence)
}

// DescribeFence says how a fence of node off the volume is carried out on
// the target, for the fences the array lists (array.FenceDescriber). It
// reads nothing from tgtd: what is listed is the array's record, and the
// target's state was confirmed when the fence returned.
func (b *Backend) DescribeFence(volID, node string) string {
	initiator, err := InitiatorName(node)
	if err != nil {
		return "no initiator carries this node ID: cut off by absence"
	}
	target, err := TargetName(volID)
	if err != nil {
		target = volID
	}
	switch b.opts.Method {
	case MethodPR:
		return fmt.Sprintf("initiator %s out of the ACL of target %s, reservation key %x preempted", initiator, target, ReservationKey(node))
	case MethodACL:
		return fmt.Sprintf("initiator %s out of the ACL of target %s, its sessions left alone (method acl cuts no live session)", initiator, target)
	default:
		return fmt.Sprintf("initiator %s out of the ACL of target %s, its sessions ended", initiator, target)
	}
}

// cut runs rounds of read, check, plan, act until CheckCut confirms the cut
// on a listing read after the last action, or FenceTimeout passes.
func (b *Backend) cut(volID, node string, cut Cut) error {
	initiator, err := InitiatorName(node)
	if err != nil {
		// The backend grants only names InitiatorName made, so nothing
		// under this node ID can have logged in: cut off by absence.
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	start := time.Now()
	deadline := start.Add(b.opts.FenceTimeout)
	ended := 0
	logger := b.logger.WithValues("volume", volID, "node", node, "initiator", initiator, "fence", cut == CutFence)
	for round := 1; ; round++ {
		t, err := b.lookup(volID)
		if err != nil {
			return err
		}
		check := CheckCut(t, initiator, cut, b.opts.Method)
		if check == nil && cut == CutFence {
			// The ACL is off, so the node cannot come back in while its
			// key goes.
			check = b.preempt(t, node)
		}
		if check == nil {
			b.record(cut, ended, time.Since(start))
			logger.V(2).Info("Cut in effect", "method", b.opts.Method, "sessionsEnded", ended, "rounds", round, "took", time.Since(start))
			return nil
		}
		if time.Now().After(deadline) {
			return unavailable("cut of node %s off volume %s not confirmed within %s: %v", node, volID, b.opts.FenceTimeout, check)
		}
		for _, s := range PlanCut(t, initiator, cut, b.opts.Method) {
			// A step that fails (a session that ended meanwhile) is
			// judged by the next listing, not by its error.
			if err := b.admin.apply(context.Background(), t.TID, initiator, s); err != nil {
				logger.V(2).Info("Step failed; the next listing decides", "step", s, "err", err)
			} else if s.Kind == StepEndConnection {
				ended++
			}
		}
		if round > 1 {
			if err := sleep(context.Background(), 20*time.Millisecond); err != nil {
				return err
			}
		}
	}
}

func (b *Backend) record(cut Cut, ended int, took time.Duration) {
	b.stats.SessionsEnded += ended
	if cut == CutFence {
		b.stats.Fences++
		b.stats.LastFence = took
	}
}

// Restore recreates the targets of every volume of the array's state and
// grants each attachment, for a driver that restarts with a new tgtd.
// Fenced nodes hold no attachment, so they stay cut off.
func (b *Backend) Restore(s *array.State) error {
	for _, id := range slices.Sorted(maps.Keys(s.Volumes)) {
		v := s.Volumes[id]
		if err := b.CreateVolume(id, v.CapacityBytes); err != nil {
			return fmt.Errorf("restore volume %s: %w", id, err)
		}
		for _, n := range v.PublishedNodes() {
			if _, err := b.Grant(id, n); err != nil {
				return fmt.Errorf("restore the attachment of volume %s to node %s: %w", id, n, err)
			}
		}
	}
	return nil
}
