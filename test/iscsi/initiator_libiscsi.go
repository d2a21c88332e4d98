//go:build libiscsi && cgo

package iscsi

/*
#cgo LDFLAGS: -liscsi
#include <stdlib.h>
#include <string.h>
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>

// The helpers keep struct scsi_task on the C side: Go sees only status,
// sense and copied data.

static int fl_write10(struct iscsi_context *c, int lun, uint32_t lba, unsigned char *data, uint32_t len, int bs, int *status, int *key, int *ascq) {
	struct scsi_task *t = iscsi_write10_sync(c, lun, lba, data, len, bs, 0, 0, 0, 0, 0);
	if (t == NULL) return -1;
	*status = t->status; *key = t->sense.key; *ascq = t->sense.ascq;
	scsi_free_scsi_task(t);
	return 0;
}

static int fl_read10(struct iscsi_context *c, int lun, uint32_t lba, unsigned char *buf, uint32_t len, int bs, int *status, int *key, int *ascq) {
	struct scsi_task *t = iscsi_read10_sync(c, lun, lba, len, bs, 0, 0, 0, 0, 0);
	if (t == NULL) return -1;
	*status = t->status; *key = t->sense.key; *ascq = t->sense.ascq;
	if (t->status == SCSI_STATUS_GOOD) {
		uint32_t n = t->datain.size < (int)len ? (uint32_t)t->datain.size : len;
		memcpy(buf, t->datain.data, n);
	}
	scsi_free_scsi_task(t);
	return 0;
}

static int fl_register(struct iscsi_context *c, int lun, uint64_t key, int *status, int *skey, int *ascq) {
	struct scsi_persistent_reserve_out_basic p;
	memset(&p, 0, sizeof(p));
	p.service_action_reservation_key = key;
	struct scsi_task *t = iscsi_persistent_reserve_out_sync(c, lun,
		SCSI_PERSISTENT_RESERVE_REGISTER_AND_IGNORE_EXISTING_KEY, SCSI_PERSISTENT_RESERVE_SCOPE_LU, 0, &p);
	if (t == NULL) return -1;
	*status = t->status; *skey = t->sense.key; *ascq = t->sense.ascq;
	scsi_free_scsi_task(t);
	return 0;
}

static int fl_readcap10(struct iscsi_context *c, int lun, uint32_t *lba, uint32_t *bs) {
	struct scsi_task *t = iscsi_readcapacity10_sync(c, lun, 0, 0);
	if (t == NULL) return -1;
	if (t->status != SCSI_STATUS_GOOD) { scsi_free_scsi_task(t); return -2; }
	struct scsi_readcapacity10 *rc = scsi_datain_unmarshall(t);
	if (rc == NULL) { scsi_free_scsi_task(t); return -3; }
	*lba = rc->lba; *bs = rc->block_size;
	scsi_free_scsi_task(t);
	return 0;
}
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// Session is one iSCSI session of one initiator to one LUN. A zombie node
// keeps one open and writes through it; it never reconnects by itself, so
// a session the target ended stays ended. Safe for concurrent use (calls
// are serialised: a libiscsi context is not).
type Session struct {
	mu     sync.Mutex
	ctx    *C.struct_iscsi_context
	lun    C.int
	bs     int
	blocks uint64
	opts   Options
}

func available() error { return nil }

// Login logs in to the target as opts.Initiator and reads the LUN's
// capacity. A target that refuses the initiator fails the login.
func Login(opts Options) (*Session, error) {
	ini := C.CString(opts.Initiator)
	defer C.free(unsafe.Pointer(ini))
	ctx := C.iscsi_create_context(ini)
	if ctx == nil {
		return nil, fmt.Errorf("libiscsi: cannot create a context for %s", opts.Initiator)
	}
	s := &Session{ctx: ctx, lun: C.int(opts.LUN), opts: opts}
	tn := C.CString(opts.Target)
	defer C.free(unsafe.Pointer(tn))
	portal := C.CString(opts.Portal)
	defer C.free(unsafe.Pointer(portal))
	C.iscsi_set_targetname(ctx, tn)
	C.iscsi_set_session_type(ctx, C.ISCSI_SESSION_NORMAL)
	C.iscsi_set_header_digest(ctx, C.ISCSI_HEADER_DIGEST_NONE)
	// A zombie that reconnected would only meet the revoked ACL; not
	// reconnecting keeps each write's outcome about this one session.
	C.iscsi_set_noautoreconnect(ctx, 1)
	C.iscsi_set_timeout(ctx, 5)
	if C.iscsi_full_connect_sync(ctx, portal, s.lun) != 0 {
		err := s.errorf("log in to %s at %s as %s", opts.Target, opts.Portal, opts.Initiator)
		C.iscsi_destroy_context(ctx)
		return nil, err
	}
	var lba, bs C.uint32_t
	if rc := C.fl_readcap10(ctx, s.lun, &lba, &bs); rc != 0 {
		err := s.errorf("read capacity of LUN %d (%d)", opts.LUN, int(rc))
		s.Close()
		return nil, err
	}
	s.bs, s.blocks = int(bs), uint64(lba)+1
	if opts.ReservationKey != 0 {
		if err := s.register(opts.ReservationKey); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// register registers the node's reservation key on this I_T nexus, as a
// node does at staging when the volume is fenced by reservations.
func (s *Session) register(key uint64) error {
	var st, skey, ascq C.int
	if C.fl_register(s.ctx, s.lun, C.uint64_t(key), &st, &skey, &ascq) != 0 {
		return s.errorf("register reservation key %#x as %s", key, s.opts.Initiator)
	}
	if st != 0 {
		return fmt.Errorf("register reservation key %#x as %s: SCSI status %#x, sense key %#x, ASC/ASCQ %#04x", key, s.opts.Initiator, int(st), int(skey), int(ascq))
	}
	return nil
}

// errorf wraps libiscsi's last error message.
func (s *Session) errorf(format string, args ...any) error {
	return fmt.Errorf("%s: %s", fmt.Sprintf(format, args...), C.GoString(C.iscsi_get_error(s.ctx)))
}

// BlockSize is the LUN's logical block size in bytes.
func (s *Session) BlockSize() int { return s.bs }

// Blocks is the LUN's size in blocks.
func (s *Session) Blocks() uint64 { return s.blocks }

// Write writes data (whole blocks) at lba and returns nil only when the
// target acknowledged it with GOOD status.
func (s *Session) Write(lba uint32, data []byte) error {
	if len(data) == 0 || len(data)%s.bs != 0 {
		return fmt.Errorf("write of %d bytes: want whole blocks of %d", len(data), s.bs)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx == nil {
		return fmt.Errorf("session closed")
	}
	buf := C.CBytes(data)
	defer C.free(buf)
	var st, key, ascq C.int
	if C.fl_write10(s.ctx, s.lun, C.uint32_t(lba), (*C.uchar)(buf), C.uint32_t(len(data)), C.int(s.bs), &st, &key, &ascq) != 0 {
		return s.errorf("WRITE(10) at %d as %s", lba, s.opts.Initiator)
	}
	if st != 0 {
		return &SCSIError{Op: "WRITE(10)", LBA: lba, Initiator: s.opts.Initiator, Status: int(st), SenseKey: int(key), ASCQ: int(ascq)}
	}
	return nil
}

// Read reads n blocks at lba.
func (s *Session) Read(lba uint32, n int) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx == nil {
		return nil, fmt.Errorf("session closed")
	}
	size := n * s.bs
	buf := C.malloc(C.size_t(size))
	defer C.free(buf)
	var st, key, ascq C.int
	if C.fl_read10(s.ctx, s.lun, C.uint32_t(lba), (*C.uchar)(buf), C.uint32_t(size), C.int(s.bs), &st, &key, &ascq) != 0 {
		return nil, s.errorf("READ(10) at %d as %s", lba, s.opts.Initiator)
	}
	if st != 0 {
		return nil, &SCSIError{Op: "READ(10)", LBA: lba, Initiator: s.opts.Initiator, Status: int(st), SenseKey: int(key), ASCQ: int(ascq)}
	}
	return C.GoBytes(buf, C.int(size)), nil
}

// Close logs out (best effort: the target may have ended the session) and
// frees the context. It is safe to call more than once.
func (s *Session) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx == nil {
		return nil
	}
	if C.iscsi_is_logged_in(s.ctx) != 0 {
		C.iscsi_logout_sync(s.ctx)
	}
	C.iscsi_destroy_context(s.ctx)
	s.ctx = nil
	return nil
}
