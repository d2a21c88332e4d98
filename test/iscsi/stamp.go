package iscsi

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"sync"
)

// stampMagic starts every stamped block.
var stampMagic = []byte("FLSTAMP1")

// Stamp says who wrote a block: the node, its boot, the volume's
// generation (how many times it moved) and the writer's sequence number.
type Stamp struct {
	Node       string
	Boot       string
	Generation uint64
	Seq        uint64
}

// Block returns a block of size bytes carrying the stamp: magic, the fields
// and a CRC, then zeros.
func (s Stamp) Block(size int) []byte {
	var b bytes.Buffer
	b.Write(stampMagic)
	for _, f := range []string{s.Node, s.Boot} {
		_ = binary.Write(&b, binary.BigEndian, uint16(len(f)))
		b.WriteString(f)
	}
	_ = binary.Write(&b, binary.BigEndian, s.Generation)
	_ = binary.Write(&b, binary.BigEndian, s.Seq)
	_ = binary.Write(&b, binary.BigEndian, crc32.ChecksumIEEE(b.Bytes()))
	out := make([]byte, size)
	copy(out, b.Bytes())
	return out
}

// ParseBlock reads a stamped block; ok is false for a block that carries no
// intact stamp (never written, or torn).
func ParseBlock(block []byte) (s Stamp, ok bool) {
	r := bytes.NewReader(block)
	magic := make([]byte, len(stampMagic))
	if _, err := r.Read(magic); err != nil || !bytes.Equal(magic, stampMagic) {
		return Stamp{}, false
	}
	fields := make([]string, 2)
	for i := range fields {
		var n uint16
		if binary.Read(r, binary.BigEndian, &n) != nil || int(n) > r.Len() {
			return Stamp{}, false
		}
		f := make([]byte, n)
		_, _ = r.Read(f)
		fields[i] = string(f)
	}
	s.Node, s.Boot = fields[0], fields[1]
	var sum uint32
	if binary.Read(r, binary.BigEndian, &s.Generation) != nil || binary.Read(r, binary.BigEndian, &s.Seq) != nil ||
		binary.Read(r, binary.BigEndian, &sum) != nil {
		return Stamp{}, false
	}
	end := len(block) - r.Len() - 4
	if crc32.ChecksumIEEE(block[:end]) != sum {
		return Stamp{}, false
	}
	return s, true
}

// Ledger records, in one order, when each write was sent, whether the
// target acknowledged it, and when each fence returned. The order is a
// counter of this process, never a clock: "after the fence" means sent
// after the fence call had returned here.
type Ledger struct {
	mu     sync.Mutex
	next   int
	writes map[Stamp]*write
	fences map[string]int // node -> event index of its fence's return
}

type write struct {
	lba   uint32
	sent  int
	acked bool
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{writes: map[Stamp]*write{}, fences: map[string]int{}}
}

func (l *Ledger) tick() int { l.next++; return l.next }

// Sent records that s is about to be written at lba.
func (l *Ledger) Sent(s Stamp, lba uint32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes[s] = &write{lba: lba, sent: l.tick()}
}

// Acked records that the target acknowledged the write of s.
func (l *Ledger) Acked(s Stamp) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w := l.writes[s]; w != nil {
		w.acked = true
	}
}

// FenceReturned records that the fence of node returned OK.
func (l *Ledger) FenceReturned(node string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fences[node] = l.tick()
}

// AckedAfterFence counts the writes of node acknowledged although sent
// after its fence returned.
func (l *Ledger) AckedAfterFence(node string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, fenced := l.fences[node]
	n := 0
	for s, w := range l.writes {
		if fenced && s.Node == node && w.acked && w.sent > f {
			n++
		}
	}
	return n
}

// Check judges the bytes of a LUN (read through a fresh session) against
// the ledger and returns every violation of "never two writers":
//   - a block of a fenced node whose write was acknowledged although sent
//     after that node's fence returned;
//   - a block of a fenced node where another node had a write acknowledged
//     that was sent after the fence: the fenced node overwrote it;
//   - a block where an acknowledged write sent after a fence left no intact
//     stamp at all.
//
// A write sent before its node's fence returned may or may not have landed;
// either is fine.
func (l *Ledger) Check(image []byte, blockSize int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	afterFence := map[uint32][]Stamp{} // acked writes sent after some fence
	for s, w := range l.writes {
		if w.acked && l.sentAfterAnyFence(w.sent) {
			afterFence[w.lba] = append(afterFence[w.lba], s)
		}
	}
	var out []string
	for lba := uint32(0); int(lba+1)*blockSize <= len(image); lba++ {
		s, ok := ParseBlock(image[int(lba)*blockSize : int(lba+1)*blockSize])
		if !ok {
			if len(afterFence[lba]) > 0 {
				out = append(out, fmt.Sprintf("block %d: acknowledged writes %v left no intact stamp", lba, afterFence[lba]))
			}
			continue
		}
		f, fenced := l.fences[s.Node]
		if !fenced {
			continue
		}
		if w := l.writes[s]; w != nil && w.acked && w.sent > f {
			out = append(out, fmt.Sprintf("block %d: node %s's write %d was acknowledged although sent after its fence returned", lba, s.Node, s.Seq))
		}
		for _, o := range afterFence[lba] {
			if o.Node != s.Node && l.writes[o].sent > f {
				out = append(out, fmt.Sprintf("block %d: fenced node %s (write %d) overwrote node %s's acknowledged write %d", lba, s.Node, s.Seq, o.Node, o.Seq))
			}
		}
	}
	slices.Sort(out)
	return out
}

func (l *Ledger) sentAfterAnyFence(sent int) bool {
	for _, f := range l.fences {
		if sent > f {
			return true
		}
	}
	return false
}
