package world

import (
	"slices"
	"testing"
)

// TestLedAs: the identities a process became leader under are read from
// its own part of the log only, so that a restart (which appends to the
// log) is never taken for the replica that led before it.
func TestLedAs(t *testing.T) {
	const (
		start  = "+ /bin/fenceline-attacher [\"--leader-election\"]\n"
		became = `I1128 12:00:01.000000    7 run.go:62] "Became leader" logger="fenceline-attacher" driver="mock.fenceline.io" lease="fenceline-system/external-attacher-leader-mock-fenceline-io" identity="host-1111"` + "\n"
		other  = `I1128 12:00:02.000000    7 run.go:77] "New leader" logger="fenceline-attacher" identity="host-2222"` + "\n"
	)
	for _, tc := range []struct {
		name string
		log  string
		want []string
	}{
		{name: "empty", log: "", want: nil},
		{name: "standby sees another leader", log: start + other, want: nil},
		{name: "leads", log: start + became, want: []string{"host-1111"}},
		{name: "led before a restart", log: start + became + start + other, want: nil},
		{name: "leads after a restart", log: start + other + start + became, want: []string{"host-1111"}},
		{name: "no identity", log: start + `"Became leader" lease="x"` + "\n", want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ledAs(nil, []byte(tc.log)); !slices.Equal(got, tc.want) {
				t.Errorf("ledAs = %q, want %q", got, tc.want)
			}
			// Read in two parts, at every line boundary, it says the same.
			for i := range len(tc.log) {
				if i > 0 && tc.log[i-1] != '\n' {
					continue
				}
				if got := ledAs(ledAs(nil, []byte(tc.log[:i])), []byte(tc.log[i:])); !slices.Equal(got, tc.want) {
					t.Errorf("ledAs read in two parts at %d = %q, want %q", i, got, tc.want)
				}
			}
		})
	}
}
