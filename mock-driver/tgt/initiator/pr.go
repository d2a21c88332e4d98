package initiator

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// PERSISTENT RESERVE OUT service actions and the reservation type the tgt
// backend uses (SPC-4 section 6.16).
const (
	PRRegister             = 0x00
	PRReserve              = 0x01
	PRPreempt              = 0x04
	PRPreemptAndAbort      = 0x05
	PRRegisterIgnoreKey    = 0x06
	TypeWriteExclusiveRO   = 0x05 // Write Exclusive, Registrants Only
	opPersistentReserveIn  = 0x5e
	opPersistentReserveOut = 0x5f
)

// PROut sends PERSISTENT RESERVE OUT with the basic parameter list: key is
// the sender's reservation key, saKey the service action key (the new key
// to register, or the key to preempt).
func (c *Conn) PROut(action, typ byte, key, saKey uint64) error {
	params := make([]byte, 24)
	binary.BigEndian.PutUint64(params[0:], key)
	binary.BigEndian.PutUint64(params[8:], saKey)
	cdb := make([]byte, 10)
	cdb[0] = opPersistentReserveOut
	cdb[1] = action
	cdb[2] = typ // scope 0: logical unit
	binary.BigEndian.PutUint32(cdb[5:], uint32(len(params)))
	_, err := c.Command(cdb, params, 0)
	return err
}

// Preempt removes victim's registration with PREEMPT AND ABORT, which also
// aborts the victim's outstanding commands. A target that rejects that
// service action as an invalid field (tgt 1.0.85 does) gets PREEMPT, which
// removes the registration without aborting; aborted says which ran.
func (c *Conn) Preempt(key, victim uint64, typ byte) (aborted bool, err error) {
	err = c.PROut(PRPreemptAndAbort, typ, key, victim)
	var se *StatusError
	if errors.As(err, &se) && se.Status == statusCheckCondition && se.SenseKey == senseIllegalRequest && se.ASC == ascInvalidFieldInCDB {
		return false, c.PROut(PRPreempt, typ, key, victim)
	}
	return err == nil, err
}

// Sense of a command the target does not support as sent.
const (
	senseIllegalRequest  = 0x05
	ascInvalidFieldInCDB = 0x24
)

// Reservation is what PERSISTENT RESERVE IN reports.
type Reservation struct {
	// Keys are the registered reservation keys (one per I_T nexus).
	Keys []uint64
	// Held reports whether a reservation exists; Holder and Type describe
	// it.
	Held   bool
	Holder uint64
	Type   byte
}

// ReadReservation reads the registered keys and the reservation.
func (c *Conn) ReadReservation() (Reservation, error) {
	var r Reservation
	keys, err := c.prIn(0x00, 8+8*64)
	if err != nil {
		return r, fmt.Errorf("READ KEYS: %w", err)
	}
	n := int(binary.BigEndian.Uint32(keys[4:8]))
	for off := 8; off+8 <= 8+n && off+8 <= len(keys); off += 8 {
		r.Keys = append(r.Keys, binary.BigEndian.Uint64(keys[off:]))
	}
	res, err := c.prIn(0x01, 24)
	if err != nil {
		return r, fmt.Errorf("READ RESERVATION: %w", err)
	}
	if binary.BigEndian.Uint32(res[4:8]) >= 16 {
		r.Held, r.Holder, r.Type = true, binary.BigEndian.Uint64(res[8:16]), res[21]&0x0f
	}
	return r, nil
}

func (c *Conn) prIn(action byte, alloc int) ([]byte, error) {
	cdb := make([]byte, 10)
	cdb[0] = opPersistentReserveIn
	cdb[1] = action
	binary.BigEndian.PutUint16(cdb[7:], uint16(alloc))
	data, err := c.Command(cdb, nil, alloc)
	if err != nil {
		return nil, err
	}
	if len(data) < 8 {
		return nil, fmt.Errorf("PERSISTENT RESERVE IN answered %d bytes", len(data))
	}
	return data, nil
}
