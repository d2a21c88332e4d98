// Package iscsi is test support for the mock driver's tgt backend: a
// userspace iSCSI initiator (libiscsi through cgo, so a test can log in as a
// node's initiator and read and write blocks through a long-lived session,
// as a zombie node would), stamped blocks, and a checker that judges a
// failover on the bytes of the LUN.
//
// The initiator is built only with the build tag libiscsi (and cgo) and
// needs Debian's libiscsi-dev; without them Login returns ErrUnavailable and
// the tests that need it skip, or fail when RequireEnv is set. No product
// binary imports this package.
package iscsi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"fenceline.io/fenceline/mock-driver/array"
	"fenceline.io/fenceline/mock-driver/driver"
	"fenceline.io/fenceline/mock-driver/tgt"
)

// RequireEnv is the environment variable CI sets after installing Debian's
// tgt and libiscsi-dev (and building with -tags libiscsi): with it set, a
// missing target or initiator fails the test instead of skipping it.
const RequireEnv = "FENCELINE_REQUIRE_TGT"

// ErrUnavailable is returned by Login when the initiator was not built in.
var ErrUnavailable = errors.New("the libiscsi initiator is not built in: install Debian's libiscsi-dev and build with -tags libiscsi (and cgo)")

// SCSIError is a command the target answered with a status other than
// GOOD.
type SCSIError struct {
	Op        string
	LBA       uint32
	Initiator string
	Status    int
	SenseKey  int
	// ASCQ holds the additional sense code and its qualifier, as libiscsi
	// reports them (0x2a03: reservations preempted).
	ASCQ int
}

// SCSI statuses and sense keys the tests look for.
const (
	StatusCheckCondition      = 0x02
	StatusReservationConflict = 0x18
	SenseUnitAttention        = 0x06
)

func (e *SCSIError) Error() string {
	return fmt.Sprintf("%s at %d as %s: SCSI status %#x, sense key %#x, ASC/ASCQ %#04x", e.Op, e.LBA, e.Initiator, e.Status, e.SenseKey, e.ASCQ)
}

// IsUnitAttention reports whether err is a UNIT ATTENTION, which an
// initiator consumes and answers by sending the command again.
func IsUnitAttention(err error) bool {
	var se *SCSIError
	return errors.As(err, &se) && se.Status == StatusCheckCondition && se.SenseKey == SenseUnitAttention
}

// Options say where and as whom to log in.
type Options struct {
	// Portal is host:port.
	Portal string
	// Target is the target's IQN.
	Target string
	// LUN is the logical unit (tgt.LUN for the mock's volumes).
	LUN int
	// Initiator is the initiator name to log in as (tgt.InitiatorName).
	Initiator string
	// ReservationKey, when not 0, is registered right after the login, as
	// a node on a volume fenced by reservations does at staging.
	ReservationKey uint64
}

// FromPublishContext reads the login options the tgt backend returned in
// ControllerPublishVolume's publish context.
func FromPublishContext(pc map[string]string) (Options, error) {
	o := Options{
		Portal:    pc[tgt.PublishContextPortal],
		Target:    pc[tgt.PublishContextTarget],
		Initiator: pc[tgt.PublishContextInitiator],
		LUN:       tgt.LUN,
	}
	if o.Portal == "" || o.Target == "" || o.Initiator == "" {
		return o, fmt.Errorf("publish context %v lacks the tgt backend's portal, target or initiator", pc)
	}
	if k := pc[tgt.PublishContextReservationKey]; k != "" {
		key, err := strconv.ParseUint(k, 16, 64)
		if err != nil {
			return o, fmt.Errorf("publish context's reservation key %q: %w", k, err)
		}
		o.ReservationKey = key
	}
	return o, nil
}

// Require skips t unless tgt and the initiator are available, and fails it
// instead when RequireEnv is set.
func Require(t testing.TB) {
	t.Helper()
	RequireTgt(t)
	if err := available(); err != nil {
		missing(t, err)
	}
}

// RequireTgt skips t unless tgtd and tgtadm are installed, and fails it
// instead when RequireEnv is set.
func RequireTgt(t testing.TB) {
	t.Helper()
	if err := TgtUsable(); err != nil {
		missing(t, err)
	}
}

// TgtUsable says why the tgt backend cannot run here, if it cannot: tgtd
// and tgtadm must be installed (Debian's tgt) and this process root.
func TgtUsable() error {
	if err := tgt.Available(); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("tgtd needs root (its control socket lives in /var/run/tgtd)")
	}
	return nil
}

// TgtDriverConfig is the mock driver's configuration on the tgt backend
// with fence method method and one node plugin per name in nodes, its
// sockets and state in a temporary directory removed when t ends (a short
// path: unix socket paths are limited, and test-named temporary
// directories are long).
func TgtDriverConfig(t testing.TB, method string, nodes ...string) driver.Config {
	t.Helper()
	dir, err := os.MkdirTemp("", "tgt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	cfg := driver.DefaultConfig()
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.Endpoint = "unix://" + filepath.Join(dir, "c.sock")
	cfg.NodeEndpoints = map[string]string{}
	for i, n := range nodes {
		cfg.NodeEndpoints[n] = "unix://" + filepath.Join(dir, strconv.Itoa(i)+".sock")
	}
	cfg.Backend, cfg.FenceMethod, cfg.Unpublish = driver.BackendTgt, method, array.UnpublishRealArray
	return cfg
}

func missing(t testing.TB, err error) {
	t.Helper()
	if os.Getenv(RequireEnv) != "" {
		t.Fatalf("%v, and %s is set", err, RequireEnv)
	}
	t.Skipf("%v (CI installs Debian's tgt and libiscsi-dev and requires these tests)", err)
}
