package initiator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// ErrLoginRefused wraps a login the target answered with a failure status.
var ErrLoginRefused = errors.New("login refused")

// Conn is a logged-in session of one connection to one LUN. Not safe for
// concurrent use.
type Conn struct {
	c          net.Conn
	lun        int
	itt        uint32
	cmdSN      uint32
	expStatSN  uint32
	immediate  bool
	timeout    time.Duration
	targetName string
}

// Login connects to portal and logs in to target as initiator, skipping
// nothing but authentication (the target must not require it). The
// context bounds the connection and the login; later commands each have
// timeout.
func Login(ctx context.Context, portal, target, initiator string, lun int, timeout time.Duration) (*Conn, error) {
	return LoginSession(ctx, portal, target, initiator, "", lun, timeout)
}

// LoginSession is Login with a session name: the initiator's sessions of
// one name share an ISID (a new login replaces the old session of that
// name, as session reinstatement does), and sessions of different names
// are separate I_T nexuses of the same initiator, as a second session of
// one host is (a checker reading beside a node's own session).
func LoginSession(ctx context.Context, portal, target, initiator, session string, lun int, timeout time.Duration) (*Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", portal)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", portal, err)
	}
	c := &Conn{c: nc, lun: lun, cmdSN: 1, timeout: timeout, targetName: target}
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	if err := c.login(target, initiator, session); err != nil {
		_ = nc.Close()
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	return c, nil
}

// login runs the security stage (AuthMethod=None) and the operational
// stage, then enters full feature phase.
func (c *Conn) login(target, initiator, session string) error {
	// The same initiator gets the same ISID at every login, so that its
	// sessions are one I_T nexus for the target: reservations are held
	// per nexus, and a new ISID would be a stranger to its own
	// registration.
	id := initiator
	if session != "" {
		id += "\x00" + session
	}
	sum := sha256.Sum256([]byte(id))
	isid := sum[:6]
	isid[0] = 0x80 | isid[0]&0x3f // "random" ISID format
	stages := []struct {
		csg, nsg byte
		keys     []string
	}{
		{0, 1, []string{"InitiatorName=" + initiator, "TargetName=" + target, "SessionType=Normal", "AuthMethod=None"}},
		{1, 3, []string{
			"HeaderDigest=None", "DataDigest=None", "ErrorRecoveryLevel=0", "MaxConnections=1",
			"InitialR2T=Yes", "ImmediateData=Yes", "MaxRecvDataSegmentLength=65536",
			"MaxBurstLength=262144", "FirstBurstLength=65536", "DefaultTime2Wait=0", "DefaultTime2Retain=0",
			"MaxOutstandingR2T=1", "DataPDUInOrder=Yes", "DataSequenceInOrder=Yes",
		}},
	}
	var tsih [2]byte
	c.itt++
	for _, st := range stages {
		req := &pdu{data: []byte(strings.Join(st.keys, "\x00") + "\x00")}
		req.bhs[0] = flagImmediate | opLoginReq
		req.bhs[1] = flagFinal | st.csg<<2 | st.nsg
		copy(req.bhs[8:14], isid)
		copy(req.bhs[14:16], tsih[:])
		req.setU32(16, c.itt)
		req.setU32(24, c.cmdSN)
		req.setU32(28, c.expStatSN)
		if err := req.write(c.c); err != nil {
			return fmt.Errorf("send login: %w", err)
		}
		resp, err := readPDU(c.c)
		if err != nil {
			return err
		}
		if resp.opcode() != opLoginResp {
			return fmt.Errorf("login answered with opcode %#x", resp.opcode())
		}
		if class, detail := resp.bhs[36], resp.bhs[37]; class != 0 {
			return fmt.Errorf("log in to %s as %s: status class %#x detail %#x: %w", target, initiator, class, detail, ErrLoginRefused)
		}
		copy(tsih[:], resp.bhs[14:16])
		c.expStatSN = resp.u32(24) + 1
		c.cmdSN = resp.u32(28)
		if st.nsg == 3 {
			c.immediate = textKey(resp.data, "ImmediateData") == "Yes"
			if resp.bhs[1]&flagFinal == 0 || resp.bhs[1]&0x03 != 3 {
				return fmt.Errorf("target did not move to full feature phase (flags %#x)", resp.bhs[1])
			}
		}
	}
	return nil
}

// textKey returns a key's value in a login text, "" if absent.
func textKey(data []byte, key string) string {
	for _, kv := range bytes.Split(data, []byte{0}) {
		if k, v, ok := strings.Cut(string(kv), "="); ok && k == key {
			return v
		}
	}
	return ""
}

// Close logs out (best effort) and closes the connection.
func (c *Conn) Close() error {
	c.itt++
	req := &pdu{}
	req.bhs[0] = flagImmediate | opLogoutReq
	req.bhs[1] = flagFinal // close the session
	req.setU32(16, c.itt)
	req.setU32(24, c.cmdSN)
	req.setU32(28, c.expStatSN)
	_ = c.c.SetDeadline(time.Now().Add(c.timeout))
	if req.write(c.c) == nil {
		_, _ = readPDU(c.c)
	}
	return c.c.Close()
}

// StatusError is a SCSI command that ended with a status other than GOOD.
type StatusError struct {
	Status         byte
	SenseKey       byte
	ASC, ASCQ      byte
	CDBOperation   byte
	TargetResponse byte
}

// StatusReservationConflict is the SCSI status of a command refused by a
// persistent reservation.
const StatusReservationConflict = 0x18

func (e *StatusError) Error() string {
	return fmt.Sprintf("SCSI command %#02x: status %#02x, sense key %#x, ASC/ASCQ %#02x/%#02x", e.CDBOperation, e.Status, e.SenseKey, e.ASC, e.ASCQ)
}

// Command sends one SCSI command. out is data to the target (sent as
// immediate data when the target allows it, else on its R2T); in is how
// many bytes to read back. It returns the data in, or a *StatusError. A
// UNIT ATTENTION (the first command of a new session on tgt gets one, for
// the reset that a login is) is consumed and the command sent again.
func (c *Conn) Command(cdb []byte, out []byte, in int) ([]byte, error) {
	for attempt := 1; ; attempt++ {
		data, err := c.command(cdb, out, in)
		var se *StatusError
		if attempt < 4 && errors.As(err, &se) && se.Status == statusCheckCondition && se.SenseKey == senseUnitAttention {
			continue
		}
		return data, err
	}
}

// SCSI status and sense key of a unit attention.
const (
	statusCheckCondition = 0x02
	senseUnitAttention   = 0x06
)

func (c *Conn) command(cdb []byte, out []byte, in int) ([]byte, error) {
	_ = c.c.SetDeadline(time.Now().Add(c.timeout))
	defer func() { _ = c.c.SetDeadline(time.Time{}) }()
	c.itt++
	req := &pdu{}
	req.bhs[0] = opSCSICmd
	req.bhs[1] = flagFinal | 0x01 // simple task attribute
	if len(out) > 0 {
		req.bhs[1] |= 0x20
		req.setU32(20, uint32(len(out)))
		if c.immediate {
			req.data = out
		}
	}
	if in > 0 {
		req.bhs[1] |= 0x40
		req.setU32(20, uint32(in))
	}
	binary.BigEndian.PutUint16(req.bhs[8:], uint16(c.lun)) // peripheral device addressing
	req.setU32(16, c.itt)
	req.setU32(24, c.cmdSN)
	req.setU32(28, c.expStatSN)
	copy(req.bhs[32:48], cdb)
	c.cmdSN++
	if err := req.write(c.c); err != nil {
		return nil, fmt.Errorf("send SCSI command: %w", err)
	}
	return c.await(cdb[0], out, in)
}

// await reads PDUs until the command's status arrives, answering R2Ts.
func (c *Conn) await(op byte, out []byte, in int) ([]byte, error) {
	data := make([]byte, in)
	for {
		p, err := readPDU(c.c)
		if err != nil {
			return nil, err
		}
		switch p.opcode() {
		case opR2T:
			if err := c.dataOut(p, out); err != nil {
				return nil, err
			}
		case opDataIn:
			off := int(p.u32(40))
			if off < len(data) {
				copy(data[off:], p.data)
			}
			if p.bhs[1]&0x01 != 0 { // status included
				c.expStatSN = p.u32(24) + 1
				if p.bhs[3] != 0 {
					return nil, &StatusError{Status: p.bhs[3], CDBOperation: op}
				}
				return data, nil
			}
		case opSCSIResp:
			c.expStatSN = p.u32(24) + 1
			if p.bhs[2] != 0 || p.bhs[3] != 0 {
				return nil, statusError(op, p)
			}
			return data, nil
		case opNopIn, opAsync:
			// Not ours; tgt sends no NOP-In unless configured to.
		case opReject:
			return nil, fmt.Errorf("target rejected SCSI command %#02x (reason %#x)", op, p.bhs[2])
		default:
			return nil, fmt.Errorf("unexpected iSCSI opcode %#x awaiting SCSI command %#02x", p.opcode(), op)
		}
	}
}

// dataOut answers an R2T with the data it asks for.
func (c *Conn) dataOut(r2t *pdu, out []byte) error {
	off, n := int(r2t.u32(40)), int(r2t.u32(44))
	if off > len(out) {
		return fmt.Errorf("R2T for offset %d of %d bytes", off, len(out))
	}
	end := min(off+n, len(out))
	d := &pdu{data: out[off:end]}
	d.bhs[0] = opDataOut
	d.bhs[1] = flagFinal
	copy(d.bhs[8:16], r2t.bhs[8:16])
	copy(d.bhs[16:24], r2t.bhs[16:24]) // ITT and target transfer tag
	d.setU32(28, c.expStatSN)
	d.setU32(40, uint32(off))
	return d.write(c.c)
}

func statusError(op byte, p *pdu) *StatusError {
	e := &StatusError{Status: p.bhs[3], TargetResponse: p.bhs[2], CDBOperation: op}
	if len(p.data) >= 2 {
		sense := p.data[2:]
		if len(sense) > 2 {
			e.SenseKey = sense[2] & 0x0f
		}
		if len(sense) > 13 {
			e.ASC, e.ASCQ = sense[12], sense[13]
		}
	}
	return e
}
