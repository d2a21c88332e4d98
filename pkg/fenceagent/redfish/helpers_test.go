package redfish_test

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"fenceline.io/fenceline/pkg/fenceagent/redfish"
	bmc "fenceline.io/fenceline/test/bmc/redfish"
)

const (
	user     = "fence-admin"
	password = "Fence-S3cret-pw"
)

// newBMC starts a simulator with the test account; opts may set systems.
func newBMC(t *testing.T, systems ...bmc.System) *bmc.Server {
	t.Helper()
	s := bmc.New(bmc.Options{Username: user, Password: password, Systems: systems})
	t.Cleanup(s.Close)
	return s
}

// newDevice is a device for s that trusts its certificate; mutate may
// change the config.
func newDevice(t *testing.T, s *bmc.Server, mutate func(*redfish.Config)) *redfish.Device {
	t.Helper()
	cfg := redfish.Config{Address: s.Address(), Username: user, Password: password, RootCAs: s.CertPool(), Timeout: 5 * time.Second}
	if mutate != nil {
		mutate(&cfg)
	}
	d, err := redfish.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return d
}

// logContext returns a context whose logger buffers every entry at the
// highest verbosity, and a function that returns what was logged.
func logContext(t *testing.T) (context.Context, func() string) {
	t.Helper()
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(10), ktesting.BufferLogs(true)))
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	t.Cleanup(cancel)
	underlier, ok := logger.GetSink().(ktesting.Underlier)
	if !ok {
		t.Fatal("ktesting logger without a buffer")
	}
	return ctx, func() string { return underlier.GetBuffer().String() }
}

// assertNoCredentials fails when a text carries the password or the
// basic-auth value made of it.
func assertNoCredentials(t *testing.T, what, text string) {
	t.Helper()
	basic := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	for _, secret := range []string{password, basic} {
		if strings.Contains(text, secret) {
			t.Fatalf("%s carries a credential: %s", what, text)
		}
	}
}

// assertSessionsClosed fails unless every session opened on s was deleted.
func assertSessionsClosed(t *testing.T, s *bmc.Server) {
	t.Helper()
	// A call whose context ended mid-connect deletes the session that
	// connect opened once it arrives, after the call returned.
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		created, deleted := s.Sessions()
		return created == deleted, nil
	})
	if err != nil {
		created, deleted := s.Sessions()
		t.Fatalf("sessions created %d, deleted %d: a session leaked on the BMC", created, deleted)
	}
}

// resets are the Reset requests s received.
func resets(s *bmc.Server) []bmc.Request {
	var out []bmc.Request
	for _, r := range s.Requests() {
		if strings.HasSuffix(r.Path, "/Actions/ComputerSystem.Reset") {
			out = append(out, r)
		}
	}
	return out
}
