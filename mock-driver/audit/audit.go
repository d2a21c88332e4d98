// Package audit is the mock driver's audit log: one JSON object per line, one
// line per RPC the driver answered (including data-plane writes), in the
// order in which the array applied them.
//
// Tests read the log back with ReadFile and assert on ordering, for example
// "the fenced ControllerUnpublishVolume for node A came before the
// ControllerPublishVolume for node B, and no write from A was accepted after
// it". The query helpers in query.go keep such assertions short.
package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// Record is one line of the audit log.
type Record struct {
	// Time is when the driver finished handling the call.
	Time time.Time `json:"time"`
	// Method is the short RPC name, e.g. "ControllerUnpublishVolume" or
	// "Write" for the mock data plane.
	Method string `json:"method"`
	// VolumeID is the volume the call was about, if any.
	VolumeID string `json:"volumeID,omitempty"`
	// NodeID is the node the call was about: the request's node_id for
	// controller calls and the fence extension's ListFences and LiftFence,
	// the serving socket's node identity for node calls and writes.
	NodeID string `json:"nodeID,omitempty"`
	// Lifted is, for a successful LiftFence, the volumes whose fences on
	// NodeID the call lifted, space-separated (empty when there was nothing
	// to lift); LiftedVolumes splits it. A string, not a slice, so that
	// records stay comparable with ==.
	Lifted string `json:"lifted,omitempty"`
	// Fence is true for a ControllerUnpublishVolume carrying fence=true.
	Fence bool `json:"fence,omitempty"`
	// Force is true for a NodeUnpublishVolume or NodeUnstageVolume carrying
	// force=true.
	Force bool `json:"force,omitempty"`
	// Code is the gRPC status code name of the answer ("OK" on success).
	Code string `json:"code"`
	// Message is the error message, or a short note for successful calls.
	Message string `json:"message,omitempty"`
	// Applied is true when the array carried the call out although its
	// answer is an error: an injected lost answer (DeadlineExceeded). Such
	// a call changed the array as if it had succeeded, so order checks
	// must count it (see Effective).
	Applied bool `json:"applied,omitempty"`
}

// LiftedVolumes returns the volumes of Lifted.
func (r Record) LiftedVolumes() []string { return strings.Fields(r.Lifted) }

// Log appends records to an audit file. It is safe for concurrent use.
type Log struct {
	mu   sync.Mutex
	f    *os.File
	path string
}

// Open opens (creating if needed) the audit file at path for appending.
func Open(path string) (*Log, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open audit log: %w", err)
	}
	return &Log{f: f, path: path}, nil
}

// Path returns the file the log writes to.
func (l *Log) Path() string { return l.path }

// Append writes one record as a single line. Each line goes out in one
// write(2) on an O_APPEND file, so a killed process leaves at worst a
// truncated last line, which ReadFile tolerates. Records are not fsynced
// one by one: the log must survive the process, not the machine.
func (l *Log) Append(r Record) error {
	line, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode audit record: %w", err)
	}
	line = append(line, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return errors.New("audit log is closed")
	}
	if _, err := l.f.Write(line); err != nil {
		return fmt.Errorf("append audit record to %s: %w", l.path, err)
	}
	return nil
}

// Close flushes the file to disk and closes it.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	f := l.f
	l.f = nil
	syncErr := f.Sync()
	if err := f.Close(); err != nil {
		return fmt.Errorf("close audit log: %w", err)
	}
	if syncErr != nil {
		return fmt.Errorf("sync audit log: %w", syncErr)
	}
	return nil
}

// ReadFile reads every record of the audit file at path.
func ReadFile(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	defer f.Close()
	recs, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("read audit log %s: %w", path, err)
	}
	return recs, nil
}

// Parse decodes audit lines from r. A last line without its newline is the
// trace of a process killed mid-append and is ignored; any other line that is
// not a record is an error naming the line.
func Parse(r io.Reader) ([]Record, error) {
	br := bufio.NewReader(r)
	var recs []Record
	for lineNo := 1; ; lineNo++ {
		line, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			// Partial (or empty) final line: not a committed record.
			return recs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", lineNo, err)
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var rec Record
		if err := json.Unmarshal(line, &rec); err != nil {
			return nil, fmt.Errorf("line %d: %w", lineNo, err)
		}
		recs = append(recs, rec)
	}
}
