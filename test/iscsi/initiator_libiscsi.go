//go:build libiscsi && cgo

package iscsi

/*
#cgo LDFLAGS: -liscsi
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>

// libiscsi's *_sync calls keep their completion state on the C stack and
// return early when poll() fails, which it does on any signal (poll is
// never restarted, and the Go runtime and its children's SIGCHLD deliver
// signals to every thread). The command then stays queued with a pointer
// into a dead stack frame, and whatever completes or cancels it later
// (the next service, the logout, destroying the context) writes into a
// stack the Go scheduler is using. These helpers run the same commands
// on the async API with the state on the heap: a call given up on is
// marked abandoned and freed by its own late callback, never before.

struct fl_call {
	int finished;
	int abandoned;
	int status;
	struct scsi_task *task;
	void *data;
};

static struct fl_call *fl_new_call(void) { return calloc(1, sizeof(struct fl_call)); }

static void fl_free_call(struct fl_call *c) {
	if (c->task != NULL) scsi_free_scsi_task(c->task);
	free(c->data);
	free(c);
}

static void fl_done(struct fl_call *c, int status, struct scsi_task *task) {
	c->status = status;
	c->task = task;
	c->finished = 1;
	if (c->abandoned) fl_free_call(c);
}

static void fl_iscsi_cb(struct iscsi_context *ctx, int status, void *command_data, void *private_data) {
	fl_done(private_data, status, NULL);
}

static void fl_scsi_cb(struct iscsi_context *ctx, int status, void *command_data, void *private_data) {
	fl_done(private_data, status, command_data);
}

// Results of the helpers besides 0: the context failed (its error says
// why), poll failed, no answer in time, out of memory, the command could
// not be queued (the context's error says why), it completed without
// GOOD status or a task, it ended without the target's answer (cancelled
// when the session dropped, timed out, failed to be sent).
enum { FL_SERVICE = -1, FL_POLL = -2, FL_DEADLINE = -3, FL_NOMEM = -4, FL_QUEUE = -5, FL_STATUS = -6, FL_NOTASK = -7, FL_ENDED = -8 };

// fl_wait services the context until the call completes or fails. Unless
// it returns 0, the call is abandoned and no longer the caller's.
static int fl_wait(struct iscsi_context *ctx, struct fl_call *c, int deadline_s) {
	time_t end = time(NULL) + deadline_s;
	int rc = 0;
	while (!c->finished) {
		if (time(NULL) > end) { rc = FL_DEADLINE; break; }
		struct pollfd pfd = { .fd = iscsi_get_fd(ctx), .events = iscsi_which_events(ctx) };
		int n = poll(&pfd, 1, 200);
		if (n < 0) {
			if (errno == EINTR) continue;
			rc = FL_POLL;
			break;
		}
		// Serviced with no events it still scans for timed-out commands.
		if (iscsi_service(ctx, n == 0 ? 0 : pfd.revents) < 0) { rc = FL_SERVICE; break; }
	}
	if (rc != 0) c->abandoned = 1;
	return rc;
}

static int fl_connect(struct iscsi_context *ctx, const char *portal, int lun, int deadline_s) {
	struct fl_call *c = fl_new_call();
	if (c == NULL) return FL_NOMEM;
	if (iscsi_full_connect_async(ctx, portal, lun, fl_iscsi_cb, c) != 0) { free(c); return FL_QUEUE; }
	int rc = fl_wait(ctx, c, deadline_s);
	if (rc != 0) return rc;
	rc = c->status == SCSI_STATUS_GOOD ? 0 : FL_STATUS;
	fl_free_call(c);
	return rc;
}

static int fl_logout(struct iscsi_context *ctx, int deadline_s) {
	struct fl_call *c = fl_new_call();
	if (c == NULL) return FL_NOMEM;
	if (iscsi_logout_async(ctx, fl_iscsi_cb, c) != 0) { free(c); return FL_QUEUE; }
	int rc = fl_wait(ctx, c, deadline_s);
	if (rc == 0) fl_free_call(c);
	return rc;
}

// fl_finish waits for a queued SCSI command and reports its status and
// sense; when out is set, up to outlen bytes of its data-in are copied.
static int fl_finish(struct iscsi_context *ctx, struct fl_call *c, int deadline_s, int *status, int *key, int *ascq, unsigned char *out, uint32_t outlen) {
	int rc = fl_wait(ctx, c, deadline_s);
	if (rc != 0) return rc;
	if (c->task == NULL) { fl_free_call(c); return FL_NOTASK; }
	if (c->status == SCSI_STATUS_CANCELLED || c->status == SCSI_STATUS_ERROR || c->status == SCSI_STATUS_TIMEOUT) {
		*status = c->status;
		fl_free_call(c);
		return FL_ENDED;
	}
	*status = c->status; *key = c->task->sense.key; *ascq = c->task->sense.ascq;
	if (out != NULL && c->status == SCSI_STATUS_GOOD) {
		uint32_t n = c->task->datain.size < (int)outlen ? (uint32_t)c->task->datain.size : outlen;
		memcpy(out, c->task->datain.data, n);
	}
	fl_free_call(c);
	return 0;
}

// fl_write10 takes ownership of data: a queued write may still send it
// after its caller gave up, so it is freed with the call.
static int fl_write10(struct iscsi_context *ctx, int lun, uint32_t lba, unsigned char *data, uint32_t len, int bs, int deadline_s, int *status, int *key, int *ascq) {
	struct fl_call *c = fl_new_call();
	if (c == NULL) { free(data); return FL_NOMEM; }
	c->data = data;
	if (iscsi_write10_task(ctx, lun, lba, data, len, bs, 0, 0, 0, 0, 0, fl_scsi_cb, c) == NULL) { fl_free_call(c); return FL_QUEUE; }
	return fl_finish(ctx, c, deadline_s, status, key, ascq, NULL, 0);
}

static int fl_read10(struct iscsi_context *ctx, int lun, uint32_t lba, unsigned char *buf, uint32_t len, int bs, int deadline_s, int *status, int *key, int *ascq) {
	struct fl_call *c = fl_new_call();
	if (c == NULL) return FL_NOMEM;
	if (iscsi_read10_task(ctx, lun, lba, len, bs, 0, 0, 0, 0, 0, fl_scsi_cb, c) == NULL) { free(c); return FL_QUEUE; }
	return fl_finish(ctx, c, deadline_s, status, key, ascq, buf, len);
}

static int fl_register(struct iscsi_context *ctx, int lun, uint64_t key, int deadline_s, int *status, int *skey, int *ascq) {
	struct scsi_persistent_reserve_out_basic p;
	memset(&p, 0, sizeof(p));
	p.service_action_reservation_key = key;
	struct fl_call *c = fl_new_call();
	if (c == NULL) return FL_NOMEM;
	// The parameter list is marshalled into the command when it is queued.
	if (iscsi_persistent_reserve_out_task(ctx, lun, SCSI_PERSISTENT_RESERVE_REGISTER_AND_IGNORE_EXISTING_KEY,
		SCSI_PERSISTENT_RESERVE_SCOPE_LU, 0, &p, fl_scsi_cb, c) == NULL) { free(c); return FL_QUEUE; }
	return fl_finish(ctx, c, deadline_s, status, skey, ascq, NULL, 0);
}

static int fl_readcap10(struct iscsi_context *ctx, int lun, int deadline_s, uint32_t *lba, uint32_t *bs) {
	struct fl_call *c = fl_new_call();
	if (c == NULL) return FL_NOMEM;
	if (iscsi_readcapacity10_task(ctx, lun, 0, 0, fl_scsi_cb, c) == NULL) { free(c); return FL_QUEUE; }
	int rc = fl_wait(ctx, c, deadline_s);
	if (rc != 0) return rc;
	rc = FL_STATUS;
	if (c->task != NULL && c->status == SCSI_STATUS_GOOD) {
		struct scsi_readcapacity10 *r = scsi_datain_unmarshall(c->task);
		if (r != NULL) { *lba = r->lba; *bs = r->block_size; rc = 0; }
	}
	fl_free_call(c);
	return rc;
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

// callDeadline bounds one command, in seconds: libiscsi's own timeout
// (5 s, set at login) ends a command the target never answers; this ends
// a wait on a connection that never becomes usable.
const callDeadline = 30

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
	if rc := C.fl_connect(ctx, portal, s.lun, callDeadline); rc != 0 {
		err := s.errorf(rc, 0, "log in to %s at %s as %s", opts.Target, opts.Portal, opts.Initiator)
		C.iscsi_destroy_context(ctx)
		return nil, err
	}
	var lba, bs C.uint32_t
	if rc := C.fl_readcap10(ctx, s.lun, callDeadline, &lba, &bs); rc != 0 {
		err := s.errorf(rc, 0, "read capacity of LUN %d", opts.LUN)
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
	if rc := C.fl_register(s.ctx, s.lun, C.uint64_t(key), callDeadline, &st, &skey, &ascq); rc != 0 {
		return s.errorf(rc, st, "register reservation key %#x as %s", key, s.opts.Initiator)
	}
	if st != 0 {
		return fmt.Errorf("register reservation key %#x as %s: SCSI status %#x, sense key %#x, ASC/ASCQ %#04x", key, s.opts.Initiator, int(st), int(skey), int(ascq))
	}
	return nil
}

// errorf describes a helper's failure rc (st is the command's status when
// it ended without an answer): what the helper found, else libiscsi's
// last error message.
func (s *Session) errorf(rc, st C.int, format string, args ...any) error {
	why := C.GoString(C.iscsi_get_error(s.ctx))
	switch rc {
	case C.FL_POLL:
		why = "poll failed"
	case C.FL_DEADLINE:
		why = fmt.Sprintf("no answer within %d s", callDeadline)
	case C.FL_NOMEM:
		why = "out of memory"
	case C.FL_STATUS:
		why = "completed without GOOD status: " + why
	case C.FL_NOTASK:
		why = "completed without a task"
	case C.FL_ENDED:
		switch st {
		case C.SCSI_STATUS_CANCELLED:
			why = "cancelled without the target's answer: the session ended"
		case C.SCSI_STATUS_TIMEOUT:
			why = "no answer from the target in time"
		default:
			why = "could not be sent to the target"
		}
	}
	return fmt.Errorf("%s: %s", fmt.Sprintf(format, args...), why)
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
	// fl_write10 owns and frees buf.
	buf := C.CBytes(data)
	var st, key, ascq C.int
	if rc := C.fl_write10(s.ctx, s.lun, C.uint32_t(lba), (*C.uchar)(buf), C.uint32_t(len(data)), C.int(s.bs), callDeadline, &st, &key, &ascq); rc != 0 {
		return s.errorf(rc, st, "WRITE(10) at %d as %s", lba, s.opts.Initiator)
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
	if rc := C.fl_read10(s.ctx, s.lun, C.uint32_t(lba), (*C.uchar)(buf), C.uint32_t(size), C.int(s.bs), callDeadline, &st, &key, &ascq); rc != 0 {
		return nil, s.errorf(rc, st, "READ(10) at %d as %s", lba, s.opts.Initiator)
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
		C.fl_logout(s.ctx, callDeadline)
	}
	C.iscsi_destroy_context(s.ctx)
	s.ctx = nil
	return nil
}
