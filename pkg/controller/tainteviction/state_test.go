package tainteviction

import (
	"testing"

	"fenceline.io/fenceline/pkg/controller/podvolumes"
)

func TestStateful(t *testing.T) {
	rwo := podvolumes.Volume{Kind: podvolumes.KindCSI, Driver: "d"}
	safe := podvolumes.Volume{Kind: podvolumes.KindCSI, Driver: "s", SafeDetach: true}
	tests := []struct {
		name               string
		vols               []podvolumes.Volume
		stateful, safeOnly bool
	}{
		{"no volume", nil, false, false},
		{"scratch, config and node-local only", []podvolumes.Volume{{Kind: podvolumes.KindHarmless}, {Kind: podvolumes.KindNodeLocal}, {Kind: podvolumes.KindInlineCSI}}, false, false},
		{"RWO CSI", []podvolumes.Volume{rwo}, true, false},
		{"RWO CSI of a safe-detach driver", []podvolumes.Volume{safe}, true, true},
		{"safe and not safe", []podvolumes.Volume{safe, rwo}, true, false},
		{"RWX CSI", []podvolumes.Volume{{Kind: podvolumes.KindCSI, RWX: true}}, false, false},
		{"ROX-only CSI", []podvolumes.Volume{{Kind: podvolumes.KindCSI, ROXOnly: true}}, false, false},
		{"RWX beside a safe RWO", []podvolumes.Volume{{Kind: podvolumes.KindCSI, RWX: true}, safe}, true, true},
		{"unresolved claim: the safe reading", []podvolumes.Volume{{Kind: podvolumes.KindUnresolved}}, true, false},
		{"non-CSI PV", []podvolumes.Volume{{Kind: podvolumes.KindOther}}, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, safe := Stateful(tc.vols)
			if st != tc.stateful || safe != tc.safeOnly {
				t.Errorf("Stateful = %v, %v; want %v, %v", st, safe, tc.stateful, tc.safeOnly)
			}
		})
	}
}
