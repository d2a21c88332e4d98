package tgt

import (
	"reflect"
	"strings"
	"testing"
)

const (
	iqnA = InitiatorPrefix + "node-a"
	iqnB = InitiatorPrefix + "node-b"
)

// target builds a Target for decision tests.
type target struct{ t *Target }

func newTarget() *target { return &target{t: &Target{TID: 4, Name: TargetPrefix + "vol-1"}} }

func (b *target) allow(initiators ...string) *target {
	b.t.ACL = append(b.t.ACL, initiators...)
	return b
}

func (b *target) session(sid int, initiator string, cids ...int) *target {
	b.t.Sessions = append(b.t.Sessions, Session{SID: sid, Initiator: initiator, Connections: cids})
	return b
}

func TestPlanAndCheckCut(t *testing.T) {
	unbind := Step{Kind: StepUnbind}
	end := func(sid, cid int) Step { return Step{Kind: StepEndConnection, SID: sid, CID: cid} }
	tests := []struct {
		name      string
		target    *Target
		cut       Cut
		method    FenceMethod
		wantSteps []Step
		wantCheck string // "" when the cut is in effect as listed
	}{
		{name: "no target: nothing can reach it", target: nil, cut: CutFence, method: MethodACLSessions},
		{
			name:   "fence: revoke first, then every connection of every session of the node, none of the others",
			target: newTarget().allow(iqnA, iqnB).session(3, iqnA, 0, 1).session(7, iqnB, 0).session(9, iqnA, 0).t,
			cut:    CutFence, method: MethodACLSessions,
			wantSteps: []Step{unbind, end(3, 0), end(3, 1), end(9, 0)},
			wantCheck: "still in the ACL",
		},
		{
			name:   "fence: revoked, a session left",
			target: newTarget().allow(iqnB).session(9, iqnA, 0).t,
			cut:    CutFence, method: MethodACLSessions,
			wantSteps: []Step{end(9, 0)},
			wantCheck: "still has 1 session(s)",
		},
		{
			name:   "fence: a session without connections is reported, nothing to delete",
			target: newTarget().session(9, iqnA).t,
			cut:    CutFence, method: MethodACLSessions,
			wantCheck: "session IDs [9]",
		},
		{
			name:   "fence in effect: other nodes' grants and sessions do not matter",
			target: newTarget().allow(iqnB).session(7, iqnB, 0).t,
			cut:    CutFence, method: MethodACLSessions,
		},
		{
			name:   "acl method: revoke only, and the session left counts as in effect (no fence)",
			target: newTarget().allow(iqnA).session(3, iqnA, 0).t,
			cut:    CutFence, method: MethodACL,
			wantSteps: []Step{unbind},
			wantCheck: "still in the ACL",
		},
		{
			name:   "acl method after the revoke: confirmed although the zombie session lives",
			target: newTarget().session(3, iqnA, 0).t,
			cut:    CutFence, method: MethodACL,
		},
		{
			name:   "pr method: revoke only; the preempted key, not the session, stops the writes",
			target: newTarget().allow(iqnA).session(3, iqnA, 0).t,
			cut:    CutFence, method: MethodPR,
			wantSteps: []Step{unbind},
			wantCheck: "still in the ACL",
		},
		{
			name:   "plain revoke leaves sessions, as a real array's unmapping does",
			target: newTarget().allow(iqnA).session(3, iqnA, 0).t,
			cut:    CutRevoke, method: MethodACLSessions,
			wantSteps: []Step{unbind},
			wantCheck: "still in the ACL",
		},
		{
			name:   "plain revoke in effect with a session left",
			target: newTarget().session(3, iqnA, 0).t,
			cut:    CutRevoke, method: MethodACLSessions,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			steps := PlanCut(tc.target, iqnA, tc.cut, tc.method)
			if !reflect.DeepEqual(steps, tc.wantSteps) {
				t.Errorf("PlanCut = %+v, want %+v", steps, tc.wantSteps)
			}
			err := CheckCut(tc.target, iqnA, tc.cut, tc.method)
			switch {
			case tc.wantCheck == "" && err != nil:
				t.Errorf("CheckCut = %v, want in effect", err)
			case tc.wantCheck != "" && (err == nil || !strings.Contains(err.Error(), tc.wantCheck)):
				t.Errorf("CheckCut = %v, want an error containing %q", err, tc.wantCheck)
			}
		})
	}
}

func TestCheckGrant(t *testing.T) {
	tests := []struct {
		name    string
		target  *Target
		wantErr string
	}{
		{name: "granted", target: newTarget().allow(iqnB, iqnA).t},
		{name: "not granted", target: newTarget().allow(iqnB).t, wantErr: "not in the ACL"},
		{name: "no target", wantErr: "does not exist"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckGrant(tc.target, iqnA)
			if (err != nil) != (tc.wantErr != "") || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("CheckGrant = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestParseFenceMethod(t *testing.T) {
	tests := []struct {
		in      string
		want    FenceMethod
		wantErr string
	}{
		{in: "", want: MethodACLSessions},
		{in: "acl+sessions", want: MethodACLSessions},
		{in: "acl", want: MethodACL},
		{in: "pr", want: MethodPR},
		{in: "sessions", wantErr: "unknown fence method"},
	}
	for _, tc := range tests {
		got, err := ParseFenceMethod(tc.in)
		if got != tc.want || (err != nil) != (tc.wantErr != "") || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("ParseFenceMethod(%q) = %q, %v; want %q, %q", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestInitiatorName(t *testing.T) {
	tests := []struct {
		node    string
		want    string
		wantErr bool
	}{
		{node: "node-a", want: "iqn.2026-11.io.fenceline.node:node-a"},
		{node: "ip-10-0-0-1.ec2.internal", want: "iqn.2026-11.io.fenceline.node:ip-10-0-0-1.ec2.internal"},
		{node: "Node-A", wantErr: true}, // folding would merge it with node-a
		{node: "node_a", wantErr: true},
		{node: "a:b", wantErr: true},
		{node: "", wantErr: true},
		{node: "-a", wantErr: true},
		{node: strings.Repeat("a", 201), wantErr: true},
	}
	for _, tc := range tests {
		got, err := InitiatorName(tc.node)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("InitiatorName(%q) = %q, %v; want %q, error %v", tc.node, got, err, tc.want, tc.wantErr)
		}
	}
}
