package tgt

import (
	"reflect"
	"strings"
	"testing"
)

// listing is `tgtadm --lld iscsi --mode target --op show` as tgt 1.0.85
// prints it: target 1 with two sessions of node-a (one with two
// connections) and one of node-b, target 2 without sessions or ACL.
const listing = `Target 1: iqn.2026-11.io.fenceline.mock:vol-1
    System information:
        Driver: iscsi
        State: ready
    I_T nexus information:
        I_T nexus: 3
            Initiator: iqn.2026-11.io.fenceline.node:node-a alias: none
            Connection: 0
                IP Address: 127.0.0.1
            Connection: 1
                IP Address: 127.0.0.1
        I_T nexus: 7
            Initiator: iqn.2026-11.io.fenceline.node:node-b alias: host-b
            Connection: 0
                IP Address: 127.0.0.1
        I_T nexus: 9
            Initiator: iqn.2026-11.io.fenceline.node:node-a alias: none
            Connection: 0
                IP Address: 127.0.0.1
    LUN information:
        LUN: 0
            Type: controller
            SCSI ID: IET     00010000
            Backing store type: null
            Backing store path: None
            Backing store flags: 
        LUN: 1
            Type: disk
            Size: 17 MB, Block size: 512
            Backing store type: rdwr
            Backing store path: /tmp/luns/vol-1.img
            Backing store flags: 
    Account information:
    ACL information:
        iqn.2026-11.io.fenceline.node:node-a
        iqn.2026-11.io.fenceline.node:node-b
Target 2: iqn.2026-11.io.fenceline.mock:vol-2
    System information:
        Driver: iscsi
        State: ready
    I_T nexus information:
    LUN information:
        LUN: 0
            Backing store path: None
    Account information:
    ACL information:
`

func TestParseTargets(t *testing.T) {
	const a, b = "iqn.2026-11.io.fenceline.node:node-a", "iqn.2026-11.io.fenceline.node:node-b"
	tests := []struct {
		name    string
		in      string
		want    []*Target
		wantErr string
	}{
		{name: "empty daemon", in: "", want: nil},
		{
			name: "sessions, LUNs and ACLs",
			in:   listing,
			want: []*Target{
				{
					TID: 1, Name: "iqn.2026-11.io.fenceline.mock:vol-1",
					Sessions: []Session{
						{SID: 3, Initiator: a, Connections: []int{0, 1}},
						{SID: 7, Initiator: b, Connections: []int{0}},
						{SID: 9, Initiator: a, Connections: []int{0}},
					},
					ACL:  []string{a, b},
					LUNs: map[int]string{0: "", 1: "/tmp/luns/vol-1.img"},
				},
				{TID: 2, Name: "iqn.2026-11.io.fenceline.mock:vol-2", LUNs: map[int]string{0: ""}},
			},
		},
		{name: "bad target line", in: "Target one: x\n", wantErr: "line 1"},
		{name: "line before any target", in: "    ACL information:\n", wantErr: "before any target"},
		{name: "bad session ID", in: "Target 1: t\n    I_T nexus information:\n        I_T nexus: x\n", wantErr: "session ID"},
		{name: "initiator outside a nexus", in: "Target 1: t\n    I_T nexus information:\n            Initiator: i\n", wantErr: "outside an I_T nexus"},
		{name: "bad connection ID", in: "Target 1: t\n    I_T nexus information:\n        I_T nexus: 1\n            Connection: y\n", wantErr: "connection ID"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTargets(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func FuzzParseTargets(f *testing.F) {
	f.Add(listing)
	f.Add("Target 1: t\n    I_T nexus information:\n        I_T nexus: 1\n")
	f.Fuzz(func(t *testing.T, in string) {
		ts, err := ParseTargets(in)
		if err != nil {
			return
		}
		for _, tg := range ts {
			for _, s := range tg.Sessions {
				// Whatever was read, a session is found by its
				// initiator: a fence must see every one.
				if len(tg.SessionsOf(s.Initiator)) == 0 {
					t.Fatalf("session %+v not found by its initiator", s)
				}
			}
		}
	})
}
