package iscsi

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// Writer writes stamped blocks through one session, as one node's
// workload: write seq goes to block Base + seq % Span, and the ledger
// records each write sent and acknowledged.
type Writer struct {
	Session Device
	Ledger  *Ledger
	// Stamp is the writer's identity; Seq is advanced by each write.
	Stamp Stamp
	// Base and Span are the blocks the writer cycles through.
	Base, Span uint32
}

// WriteNext writes the next block and returns the target's verdict.
func (w *Writer) WriteNext() error {
	w.Stamp.Seq++
	lba := w.Base + uint32(w.Stamp.Seq%uint64(w.Span))
	w.Ledger.Sent(w.Stamp, lba)
	block := w.Stamp.Block(w.Session.BlockSize())
	err := w.Session.Write(lba, block)
	// A node's SCSI layer consumes a unit attention (a reset, preempted
	// reservations) and sends the command again; so does the workload.
	for retry := 0; retry < 3 && IsUnitAttention(err); retry++ {
		err = w.Session.Write(lba, block)
	}
	if err != nil {
		return err
	}
	w.Ledger.Acked(w.Stamp)
	return nil
}

// Run writes until ctx ends (nil) or a write fails (its error). acked, if
// not nil, receives a value after each acknowledged write, without blocking.
func (w *Writer) Run(ctx context.Context, acked chan<- struct{}) error {
	for ctx.Err() == nil {
		if err := w.WriteNext(); err != nil {
			return err
		}
		select {
		case acked <- struct{}{}:
		default:
		}
	}
	return nil
}

// ReadAll reads blocks [0, n) through a fresh session logged in with opts,
// for the checker.
func ReadAll(opts Options, n uint32) ([]byte, error) {
	s, err := Login(opts)
	if err != nil {
		return nil, fmt.Errorf("checker's fresh session: %w", err)
	}
	defer s.Close()
	return ReadBlocks(s, n)
}

// ReadBlocks reads blocks [0, n) through s.
func ReadBlocks(s Device, n uint32) ([]byte, error) {
	var out []byte
	for lba := uint32(0); lba < n; lba += 64 {
		c := min(64, n-lba)
		b, err := s.Read(lba, int(c))
		if err != nil {
			return nil, err
		}
		out = append(out, b...)
	}
	if len(out) == 0 {
		return nil, errors.Join(io.ErrUnexpectedEOF, fmt.Errorf("read nothing"))
	}
	return out, nil
}
