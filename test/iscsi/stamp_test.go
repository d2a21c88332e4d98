package iscsi

import (
	"reflect"
	"strings"
	"testing"
)

func TestStampRoundTrip(t *testing.T) {
	s := Stamp{Node: "node-a", Boot: "boot-1", Generation: 2, Seq: 77}
	b := s.Block(512)
	got, ok := ParseBlock(b)
	if !ok || got != s {
		t.Fatalf("ParseBlock = %+v, %v; want %+v", got, ok, s)
	}
	b[20] ^= 1
	if _, ok := ParseBlock(b); ok {
		t.Fatal("a torn stamp parsed")
	}
	if _, ok := ParseBlock(make([]byte, 512)); ok {
		t.Fatal("a zero block parsed")
	}
}

// history builds a ledger and the LUN image its writes left.
type history struct {
	l     *Ledger
	image []byte
}

const bs = 512

func newHistory() *history { return &history{l: NewLedger(), image: make([]byte, 8*bs)} }

// write records a write of node at lba; landed puts it on the image.
func (h *history) write(node string, seq uint64, lba uint32, acked, landed bool) *history {
	s := Stamp{Node: node, Boot: "b", Seq: seq}
	h.l.Sent(s, lba)
	if acked {
		h.l.Acked(s)
	}
	if landed {
		copy(h.image[int(lba)*bs:], s.Block(bs))
	}
	return h
}

func (h *history) fence(node string) *history { h.l.FenceReturned(node); return h }

func TestCheck(t *testing.T) {
	tests := []struct {
		name string
		h    *history
		want []string // substrings, one per violation
	}{
		{
			name: "clean failover: old writes before the fence, new node after",
			h:    newHistory().write("a", 1, 0, true, true).write("a", 2, 1, true, true).fence("a").write("b", 1, 1, true, true),
		},
		{
			name: "write in flight at the fence, landed but unacknowledged: fine",
			h:    newHistory().write("a", 1, 0, false, true).fence("a"),
		},
		{
			name: "zombie acknowledged after the fence",
			h:    newHistory().write("a", 1, 0, true, true).fence("a").write("a", 2, 2, true, true),
			want: []string{"block 2: node a's write 2 was acknowledged although sent after its fence"},
		},
		{
			name: "zombie overwrote the new node",
			h:    newHistory().fence("a").write("b", 1, 3, true, true).write("a", 5, 3, true, true),
			want: []string{"block 3: fenced node a (write 5) overwrote node b's acknowledged write 1", "block 3: node a's write 5 was acknowledged"},
		},
		{
			name: "acknowledged write after the fence lost",
			h:    newHistory().fence("a").write("b", 1, 4, true, false),
			want: []string{"block 4: acknowledged writes"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.h.l.Check(tc.h.image, bs)
			if len(got) != len(tc.want) {
				t.Fatalf("Check = %q, want %d violations like %q", got, len(tc.want), tc.want)
			}
			for _, w := range tc.want {
				found := false
				for _, g := range got {
					found = found || strings.Contains(g, w)
				}
				if !found {
					t.Errorf("no violation like %q in %q", w, got)
				}
			}
		})
	}
}

func TestFromPublishContext(t *testing.T) {
	pc := map[string]string{
		"mock.fenceline.io/iscsi-portal": "127.0.0.1:3260", "mock.fenceline.io/iscsi-target": "iqn.t",
		"mock.fenceline.io/iscsi-initiator": "iqn.i", "mock.fenceline.io/iscsi-lun": "1",
	}
	got, err := FromPublishContext(pc)
	if want := (Options{Portal: "127.0.0.1:3260", Target: "iqn.t", Initiator: "iqn.i", LUN: 1}); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("FromPublishContext = %+v, %v; want %+v", got, err, want)
	}
	if _, err := FromPublishContext(map[string]string{"mock.fenceline.io/node": "a"}); err == nil {
		t.Fatal("a memory backend's context gave login options")
	}
}
