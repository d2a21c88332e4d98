package fence

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// registrationChildEnv marks the re-executed test binary of
// TestRegistrationConflictPanicMode.
const registrationChildEnv = "FENCE_REGISTRATION_CHILD"

// registrationChildMarker is what the child prints once every package of the
// binary has been initialised.
const registrationChildMarker = "fence: protobuf registration complete"

// TestMain lets the test binary act as the child of
// TestRegistrationConflictPanicMode: reaching TestMain means that every
// package initialiser, including protobuf file registration, has run.
func TestMain(m *testing.M) {
	if os.Getenv(registrationChildEnv) != "" {
		fmt.Println(registrationChildMarker, "GOLANG_PROTOBUF_REGISTRATION_CONFLICT="+os.Getenv("GOLANG_PROTOBUF_REGISTRATION_CONFLICT"))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestRegistrationConflictPanicMode starts this test binary again, which links
// both the official csi package and the extension, with the protobuf runtime
// told to panic on any registration conflict. Registration happens during
// package initialisation, so the child only prints its marker if both files
// registered without a conflict.
func TestRegistrationConflictPanicMode(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("locating the test binary: %v", err)
	}
	cmd := exec.CommandContext(testContext(t), exe)
	cmd.Env = append(os.Environ(),
		"GOLANG_PROTOBUF_REGISTRATION_CONFLICT=panic",
		registrationChildEnv+"=1",
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("test binary with GOLANG_PROTOBUF_REGISTRATION_CONFLICT=panic failed: %v\n%s", err, out)
	}
	want := registrationChildMarker + " GOLANG_PROTOBUF_REGISTRATION_CONFLICT=panic"
	if !bytes.Contains(out, []byte(want)) {
		t.Fatalf("child output lacks %q:\n%s", want, out)
	}
}
