package iscsi

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"maps"
	"slices"
	"sync"
	"time"
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
// after the fence call had returned here. A fence made by another process
// (the attacher's, judged from the driver's audit log) is placed by
// FenceReturnedAt on this host's wall clock instead, the one clock both
// processes share.
//
// A fence cuts a node off until the node's clean-up lifts it: it judges
// the writers (a stamp's node, boot and generation) whose first write was
// sent before the fence, or after it but before the next lift (a login
// the target should have refused). A writer that began after a lift (the
// node cleaned up, had the volume published again and logged in anew) is
// judged by the node's next fence, if any.
type Ledger struct {
	mu     sync.Mutex
	next   int
	writes map[Stamp]*write
	fences map[string][]fence // node -> its fences' returns
	lifts  map[string][]fence // node -> its clean-ups' returns
}

type write struct {
	lba    uint32
	sent   int
	sentAt time.Time
	acked  bool
}

// fence is when a node's fence returned: an event of this ledger (tick),
// or a wall-clock time of another process (tick 0).
type fence struct {
	tick int
	at   time.Time
}

// before reports whether the fence returned before w was sent.
func (f fence) before(w *write) bool {
	if f.tick > 0 {
		return w.sent > f.tick
	}
	return w.sentAt.After(f.at)
}

// earlier orders two fences of one kind.
func (f fence) earlier(o fence) bool {
	if f.tick > 0 && o.tick > 0 {
		return f.tick < o.tick
	}
	return f.at.Before(o.at)
}

// writer is a stamp without its sequence number: one session's writer.
type writer struct {
	node, boot string
	generation uint64
}

func writerOf(s Stamp) writer { return writer{s.Node, s.Boot, s.Generation} }

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{writes: map[Stamp]*write{}, fences: map[string][]fence{}, lifts: map[string][]fence{}}
}

func (l *Ledger) tick() int { l.next++; return l.next }

// Sent records that s is about to be written at lba.
func (l *Ledger) Sent(s Stamp, lba uint32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes[s] = &write{lba: lba, sent: l.tick(), sentAt: time.Now()}
}

// Acked records that the target acknowledged the write of s.
func (l *Ledger) Acked(s Stamp) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w := l.writes[s]; w != nil {
		w.acked = true
	}
}

// FenceReturned records that a fence of node returned OK, now.
func (l *Ledger) FenceReturned(node string) { l.record(l.fences, node, time.Time{}) }

// FenceReturnedAt records that another process's fence of node returned
// OK at t, read from its record.
func (l *Ledger) FenceReturnedAt(node string, t time.Time) { l.record(l.fences, node, t) }

// Lifted records that node's clean-up of the volume (the unforced
// NodeUnstageVolume that lifts a fence) returned OK, now.
func (l *Ledger) Lifted(node string) { l.record(l.lifts, node, time.Time{}) }

// LiftedAt is Lifted for another process's record, at t.
func (l *Ledger) LiftedAt(node string, t time.Time) { l.record(l.lifts, node, t) }

// record appends an event of node to m: at t, or now in the ledger's own
// order when t is zero.
func (l *Ledger) record(m map[string][]fence, node string, t time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := fence{at: t}
	if t.IsZero() {
		f = fence{tick: l.tick()}
	}
	m[node] = append(m[node], f)
}

// ClearFences forgets every fence and lift, for a caller that reads them
// afresh from another process's records before each check.
func (l *Ledger) ClearFences() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.fences)
	clear(l.lifts)
}

// Writes returns how many writes were sent and how many acknowledged.
func (l *Ledger) Writes() (sent, acked int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, w := range l.writes {
		sent++
		if w.acked {
			acked++
		}
	}
	return sent, acked
}

// judge returns, for each writer that a fence judges, the earliest fence
// of its node that returned after the writer's first write was sent or
// that no lift followed before it.
func (l *Ledger) judge() map[writer]fence {
	first := map[writer]*write{}
	for s, w := range l.writes {
		k := writerOf(s)
		if f := first[k]; f == nil || w.sent < f.sent {
			first[k] = w
		}
	}
	out := map[writer]fence{}
	for k, w := range first {
		for _, f := range l.fences[k.node] {
			if f.before(w) && l.liftedBetween(k.node, f, w) {
				continue // a fence lifted before this session began
			}
			if cur, ok := out[k]; !ok || f.earlier(cur) {
				out[k] = f
			}
		}
	}
	return out
}

// AckedAfterFence counts the writes of node acknowledged although sent
// after a fence that judges their writer returned.
func (l *Ledger) AckedAfterFence(node string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	judged := l.judge()
	n := 0
	for s, w := range l.writes {
		if f, ok := judged[writerOf(s)]; ok && s.Node == node && w.acked && f.before(w) {
			n++
		}
	}
	return n
}

// Check judges the bytes of a LUN (read through a fresh session) against
// the ledger and returns every violation of "never two writers":
//   - a block of a fenced writer whose write was acknowledged although
//     sent after the fence returned;
//   - a block of a fenced writer where another node had a write
//     acknowledged that was sent after the fence: the fenced writer
//     overwrote it;
//   - a block where an acknowledged write sent after a fence left no intact
//     stamp at all.
//
// A write sent before its writer's fence returned may or may not have
// landed; either is fine.
func (l *Ledger) Check(image []byte, blockSize int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	judged := l.judge()
	afterFence := map[uint32][]Stamp{} // acked writes sent after some fence
	for s, w := range l.writes {
		if w.acked && l.sentAfterAnyFence(w) {
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
		f, fenced := judged[writerOf(s)]
		if !fenced {
			continue
		}
		if w := l.writes[s]; w != nil && w.acked && f.before(w) {
			out = append(out, fmt.Sprintf("block %d: node %s's write %d was acknowledged although sent after its fence returned", lba, s.Node, s.Seq))
		}
		for _, o := range afterFence[lba] {
			if o.Node != s.Node && f.before(l.writes[o]) {
				out = append(out, fmt.Sprintf("block %d: fenced node %s (write %d) overwrote node %s's acknowledged write %d", lba, s.Node, s.Seq, o.Node, o.Seq))
			}
		}
	}
	slices.Sort(out)
	return out
}

// liftedBetween reports whether a clean-up of node returned after fence f
// and before w was sent.
func (l *Ledger) liftedBetween(node string, f fence, w *write) bool {
	for _, lift := range l.lifts[node] {
		if f.earlier(lift) && lift.before(w) {
			return true
		}
	}
	return false
}

func (l *Ledger) sentAfterAnyFence(w *write) bool {
	for _, fs := range l.fences {
		for _, f := range fs {
			if f.before(w) {
				return true
			}
		}
	}
	return false
}

// Book keeps one Ledger per volume: stamps and block numbers are a
// volume's own, so each LUN is judged on its own ledger.
type Book struct {
	mu      sync.Mutex
	ledgers map[string]*Ledger
}

// For returns the ledger of volume, creating it.
func (b *Book) For(volume string) *Ledger {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ledgers == nil {
		b.ledgers = map[string]*Ledger{}
	}
	l := b.ledgers[volume]
	if l == nil {
		l = NewLedger()
		b.ledgers[volume] = l
	}
	return l
}

// Volumes returns the volumes with a ledger, sorted.
func (b *Book) Volumes() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Sorted(maps.Keys(b.ledgers))
}
