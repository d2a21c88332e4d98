package tgt

import (
	"strings"
	"testing"

	"fenceline.io/fenceline/mock-driver/tgt/initiator"
)

func TestCheckReservation(t *testing.T) {
	a, b := ReservationKey("node-a"), ReservationKey("node-b")
	held := func(keys ...uint64) initiator.Reservation {
		return initiator.Reservation{Keys: append([]uint64{controllerKey}, keys...), Held: true, Holder: controllerKey, Type: initiator.TypeWriteExclusiveRO}
	}
	tests := []struct {
		name    string
		r       initiator.Reservation
		wantErr string
	}{
		{name: "node preempted, others registered", r: held(b)},
		{name: "node still registered", r: held(a, b), wantErr: "still registered"},
		{name: "no reservation: anyone may write", r: initiator.Reservation{Keys: []uint64{b}}, wantErr: "does not hold"},
		{name: "reservation held by a node", r: initiator.Reservation{Held: true, Holder: b, Type: initiator.TypeWriteExclusiveRO}, wantErr: "does not hold"},
		{name: "wrong type: registrants are not enforced", r: initiator.Reservation{Held: true, Holder: controllerKey, Type: 0x01}, wantErr: "does not hold"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckReservation(tc.r, a)
			if (err != nil) != (tc.wantErr != "") || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("CheckReservation = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestReservationKeysDiffer(t *testing.T) {
	seen := map[uint64]string{controllerKey: "the backend"}
	for _, n := range []string{"node-a", "node-b", "controller", "backend:controller", ""} {
		k := ReservationKey(n)
		if k == 0 || seen[k] != "" {
			t.Fatalf("key %#x of %q is zero or also %s's", k, n, seen[k])
		}
		seen[k] = n
	}
}
