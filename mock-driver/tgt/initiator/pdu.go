// Package initiator is a minimal iSCSI initiator in pure Go, for the tgt
// backend's own control commands: log in (no authentication), send a SCSI
// command with up to one burst of data out or in, and read its status and
// sense. It is what lets the mock driver's controller, a product binary
// without cgo, hold and preempt SCSI-3 persistent reservations on its
// targets, and the tests' node stand-ins read and write blocks through a
// session of their own, as a node's SCSI layer does. It is no production
// data path: one command at a time, no digests, no error recovery, one
// connection per session.
package initiator

import (
	"encoding/binary"
	"fmt"
	"io"
)

// iSCSI opcodes (RFC 7143 section 11).
const (
	opNopOut     = 0x00
	opSCSICmd    = 0x01
	opLoginReq   = 0x03
	opDataOut    = 0x05
	opLogoutReq  = 0x06
	opNopIn      = 0x20
	opSCSIResp   = 0x21
	opLoginResp  = 0x23
	opDataIn     = 0x25
	opLogoutResp = 0x26
	opR2T        = 0x31
	opAsync      = 0x32
	opReject     = 0x3f

	flagImmediate = 0x40
	flagFinal     = 0x80
)

// pdu is one iSCSI protocol data unit: the 48-byte basic header segment
// and the data segment (additional header segments are skipped).
type pdu struct {
	bhs  [48]byte
	data []byte
}

func (p *pdu) opcode() byte { return p.bhs[0] & 0x3f }

func (p *pdu) u32(off int) uint32 { return binary.BigEndian.Uint32(p.bhs[off:]) }

func (p *pdu) setU32(off int, v uint32) { binary.BigEndian.PutUint32(p.bhs[off:], v) }

// write sends the PDU with its data length set and the data padded to a
// multiple of 4 bytes.
func (p *pdu) write(w io.Writer) error {
	n := len(p.data)
	p.bhs[5], p.bhs[6], p.bhs[7] = byte(n>>16), byte(n>>8), byte(n)
	buf := make([]byte, 0, 48+n+3)
	buf = append(buf, p.bhs[:]...)
	buf = append(buf, p.data...)
	for len(buf)%4 != 0 {
		buf = append(buf, 0)
	}
	_, err := w.Write(buf)
	return err
}

// readPDU reads one PDU.
func readPDU(r io.Reader) (*pdu, error) {
	p := &pdu{}
	if _, err := io.ReadFull(r, p.bhs[:]); err != nil {
		return nil, fmt.Errorf("read iSCSI header: %w", err)
	}
	ahs := int(p.bhs[4]) * 4
	n := int(p.bhs[5])<<16 | int(p.bhs[6])<<8 | int(p.bhs[7])
	rest := make([]byte, ahs+n+(4-n%4)%4)
	if _, err := io.ReadFull(r, rest); err != nil {
		return nil, fmt.Errorf("read iSCSI data segment: %w", err)
	}
	p.data = rest[ahs : ahs+n]
	return p, nil
}
