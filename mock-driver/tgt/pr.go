package tgt

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"time"

	"fenceline.io/fenceline/mock-driver/tgt/initiator"
)

// ControllerInitiator is the initiator name the backend logs in with to
// hold and preempt reservations (MethodPR). It lies outside InitiatorPrefix,
// so no node ID maps to it.
const ControllerInitiator = "iqn.2026-11.io.fenceline.backend:controller"

// PublishContextReservationKey is the publish-context key of the node's
// reservation key (MethodPR), in hexadecimal: the node registers it when it
// stages the volume.
const PublishContextReservationKey = "mock.fenceline.io/iscsi-reservation-key"

// ReservationKey is a node's SCSI-3 persistent reservation key: the first
// 8 bytes of the SHA-256 of its node ID (never 0, which means "no key").
func ReservationKey(nodeID string) uint64 {
	return hashKey("node:" + nodeID)
}

// controllerKey is the backend's own key.
var controllerKey = hashKey("backend:controller")

func hashKey(s string) uint64 {
	sum := sha256.Sum256([]byte(s))
	if k := binary.BigEndian.Uint64(sum[:8]); k != 0 {
		return k
	}
	return 1
}

// CheckReservation says whether a node is cut off a volume by reservation:
// the backend holds a Write Exclusive - Registrants Only reservation (so
// an unregistered initiator's writes fail with RESERVATION CONFLICT on any
// session) and the node's key is no longer registered.
func CheckReservation(r initiator.Reservation, nodeKey uint64) error {
	if !r.Held || r.Holder != controllerKey || r.Type != initiator.TypeWriteExclusiveRO {
		return fmt.Errorf("the backend does not hold a Write Exclusive - Registrants Only reservation (held %v by %#x, type %#x)", r.Held, r.Holder, r.Type)
	}
	if slices.Contains(r.Keys, nodeKey) {
		return fmt.Errorf("key %#x is still registered", nodeKey)
	}
	return nil
}

// controllerSession returns the backend's session to the target, logging
// in and registering the backend's key when it has none. tgt binds a
// registration to the session it came on (a new login is a new I_T nexus,
// a stranger to the old registration), so the backend keeps one session
// per volume open for as long as the volume lives, as a reservation holder
// keeps its path.
func (b *Backend) controllerSession(t *Target) (*initiator.Conn, error) {
	if c := b.ctrl[t.Name]; c != nil {
		return c, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := initiator.Login(ctx, b.portal, t.Name, ControllerInitiator, LUN, 5*time.Second)
	if err != nil {
		return nil, unavailable("%v", err)
	}
	if err := c.PROut(initiator.PRRegisterIgnoreKey, 0, 0, controllerKey); err != nil {
		_ = c.Close()
		return nil, unavailable("register the backend's key on %s: %v", t.Name, err)
	}
	b.ctrl[t.Name] = c
	return c, nil
}

// dropControllerSession closes the backend's session to a target, after a
// failure (the next call logs in again) or before the target goes.
func (b *Backend) dropControllerSession(name string) {
	if c := b.ctrl[name]; c != nil {
		_ = c.Close()
		delete(b.ctrl, name)
	}
}

// reserve lets the backend in and makes it hold the reservation, for a
// new volume (MethodPR only).
func (b *Backend) reserve(t *Target) error {
	if b.opts.Method != MethodPR {
		return nil
	}
	if !t.Allowed(ControllerInitiator) {
		if _, err := b.admin.run(context.Background(), "--mode", "target", "--op", "bind", "--tid", strconv.Itoa(t.TID), "--initiator-name", ControllerInitiator); err != nil {
			return unavailable("let the backend in to %s: %v", t.Name, err)
		}
	}
	c, err := b.controllerSession(t)
	if err != nil {
		return err
	}
	r, err := c.ReadReservation()
	if err == nil && !r.Held {
		err = c.PROut(initiator.PRReserve, initiator.TypeWriteExclusiveRO, controllerKey, 0)
	}
	if err != nil {
		b.dropControllerSession(t.Name)
		return unavailable("reserve %s: %v", t.Name, err)
	}
	return nil
}

// preempt removes the node's registration from the volume and confirms it
// on a fresh read (MethodPR only).
func (b *Backend) preempt(t *Target, node string) error {
	if b.opts.Method != MethodPR || t == nil {
		return nil
	}
	if err := b.reserve(t); err != nil {
		return err
	}
	key := ReservationKey(node)
	c := b.ctrl[t.Name]
	r, err := c.ReadReservation()
	if err == nil && slices.Contains(r.Keys, key) {
		var aborted bool
		aborted, err = c.Preempt(controllerKey, key, initiator.TypeWriteExclusiveRO)
		b.logger.V(2).Info("Preempted a node's reservation key", "node", node, "target", t.Name, "abortedCommands", aborted, "err", err)
	}
	if err == nil {
		r, err = c.ReadReservation()
	}
	if err != nil {
		b.dropControllerSession(t.Name)
		return unavailable("preempt node %s's key on %s: %v", node, t.Name, err)
	}
	if err := CheckReservation(r, key); err != nil {
		return unavailable("fence of node %s off %s not in effect: %v", node, t.Name, err)
	}
	return nil
}
