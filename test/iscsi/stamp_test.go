package iscsi

import (
	"reflect"
	"strings"
	"testing"
	"time"
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
	// now is the history's own wall clock: every write and external fence
	// is a millisecond after the one before.
	now time.Time
}

const bs = 512

func newHistory() *history {
	return &history{l: NewLedger(), image: make([]byte, 8*bs), now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (h *history) tick() time.Time { h.now = h.now.Add(time.Millisecond); return h.now }

// write records a write of node at lba; landed puts it on the image.
func (h *history) write(node string, seq uint64, lba uint32, acked, landed bool) *history {
	return h.writeGen(node, 0, seq, lba, acked, landed)
}

// writeGen is write by the node's writer of generation gen.
func (h *history) writeGen(node string, gen, seq uint64, lba uint32, acked, landed bool) *history {
	s := Stamp{Node: node, Boot: "b", Generation: gen, Seq: seq}
	h.l.Sent(s, lba)
	h.l.writes[s].sentAt = h.tick()
	if acked {
		h.l.Acked(s)
	}
	if landed {
		copy(h.image[int(lba)*bs:], s.Block(bs))
	}
	return h
}

func (h *history) fence(node string) *history { h.l.FenceReturned(node); return h }

func (h *history) lift(node string) *history { h.l.Lifted(node); return h }

func (h *history) liftAt(node string) *history { h.l.LiftedAt(node, h.tick()); return h }

// fenceAt records a fence another process made, at the history's clock.
func (h *history) fenceAt(node string) *history { h.l.FenceReturnedAt(node, h.tick()); return h }

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
			name: "another process's fence: writes before it are fine",
			h:    newHistory().write("a", 1, 0, true, true).fenceAt("a").write("b", 1, 1, true, true),
		},
		{
			name: "another process's fence: zombie acknowledged after it",
			h:    newHistory().write("a", 1, 0, true, true).fenceAt("a").write("a", 2, 2, true, true),
			want: []string{"block 2: node a's write 2 was acknowledged although sent after its fence"},
		},
		{
			name: "another process's later fence does not move the first",
			h:    newHistory().write("a", 1, 0, true, true).fenceAt("a").write("a", 2, 2, true, true).fenceAt("a"),
			want: []string{"block 2: node a's write 2 was acknowledged although sent after its fence"},
		},
		{
			name: "a session begun after the clean-up lifted the fence is not judged by it",
			h: newHistory().write("a", 1, 0, true, true).fence("a").lift("a").write("b", 1, 1, true, true).fence("b").
				writeGen("a", 1, 1, 1, true, true),
		},
		{
			name: "a session begun after the fence but before any clean-up is judged by it",
			h:    newHistory().write("a", 1, 0, true, true).fence("a").writeGen("a", 1, 2, 2, true, true),
			want: []string{"block 2: node a's write 2 was acknowledged although sent after its fence"},
		},
		{
			name: "the node's second session is judged by its second fence",
			h: newHistory().write("a", 1, 0, true, true).fence("a").lift("a").writeGen("a", 1, 1, 1, true, true).fence("a").
				writeGen("a", 1, 2, 2, true, true),
			want: []string{"block 2: node a's write 2 was acknowledged although sent after its fence"},
		},
		{
			name: "another process's fence and clean-up, then a new session",
			h:    newHistory().write("a", 1, 0, true, true).fenceAt("a").liftAt("a").writeGen("a", 1, 1, 1, true, true),
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
