// Package persist stores one JSON document in a file and replaces it
// crash-safely: the new content goes to a temporary file in the same
// directory, is fsynced, renamed over the old file, and the directory is
// fsynced. A crash at any point leaves either the old or the new document,
// never a mix. A file that cannot be decoded anyway (disk corruption, a
// hand edit) is moved aside rather than crashing the driver at every start.
package persist

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// Step names a point of Save at which a test hook may inject a failure.
type Step string

// The steps of Save, in order.
const (
	StepWrite   Step = "write"
	StepSync    Step = "sync"
	StepRename  Step = "rename"
	StepSyncDir Step = "syncdir"
)

// Store is a crash-safe single-document JSON file.
type Store struct {
	path string
	// hook, when set, runs before each step of Save; a non-nil error aborts
	// Save at that step as if the system call had failed.
	hook func(Step) error
}

// Option configures a Store.
type Option func(*Store)

// WithFaultHook makes Save call hook before each step and fail with its
// error. Tests use it to show that a failed save loses nothing.
func WithFaultHook(hook func(Step) error) Option { return func(s *Store) { s.hook = hook } }

// New returns a Store for the file at path. The directory must exist.
func New(path string, opts ...Option) *Store {
	s := &Store{path: path}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Validator is implemented by documents that can check their own
// consistency. Load treats a document that decodes but fails Validate like
// one that does not decode: valid JSON can still be nonsense (a hand edit, a
// bug in an older version), and loading it would crash later instead.
type Validator interface {
	Validate() error
}

// CorruptError reports a state file that could not be decoded and was moved
// aside so that the driver can start with empty state.
type CorruptError struct {
	// Path is the state file that was corrupt.
	Path string
	// MovedTo is where the corrupt file now is.
	MovedTo string
	// Err is the decoding error.
	Err error
}

// Error describes the corruption and where the file went.
func (e *CorruptError) Error() string {
	return fmt.Sprintf("state file %s is corrupt (%v); moved it to %s and started with empty state", e.Path, e.Err, e.MovedTo)
}

// Unwrap returns the decoding error.
func (e *CorruptError) Unwrap() error { return e.Err }

// Load decodes the stored document into v. It returns an error wrapping
// fs.ErrNotExist when there is no file yet, and a *CorruptError (after
// moving the file aside) when the file cannot be decoded or, if v is a
// Validator, does not validate.
func (s *Store) Load(v any) error {
	s.removeStaleTemps()
	data, err := os.ReadFile(s.path)
	if err != nil {
		return fmt.Errorf("load state: %w", err)
	}
	decErr := json.Unmarshal(data, v)
	if decErr == nil {
		val, ok := v.(Validator)
		if !ok {
			return nil
		}
		if decErr = val.Validate(); decErr == nil {
			return nil
		}
	}
	if len(data) == 0 {
		decErr = errors.New("file is empty")
	}
	aside := fmt.Sprintf("%s.corrupt-%s", s.path, time.Now().UTC().Format("20060102T150405.000000000Z"))
	if err := os.Rename(s.path, aside); err != nil {
		return fmt.Errorf("state file %s is corrupt (%v) and could not be moved aside: %w", s.path, decErr, err)
	}
	if err := syncDir(filepath.Dir(s.path)); err != nil {
		return fmt.Errorf("state file %s is corrupt (%v); moved to %s but: %w", s.path, decErr, aside, err)
	}
	return &CorruptError{Path: s.path, MovedTo: aside, Err: decErr}
}

// Save replaces the stored document with v. When Save returns an error the
// file still holds the previous document.
func (s *Store) Save(v any) (err error) {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	dir := filepath.Dir(s.path)
	tmp, err := os.CreateTemp(dir, filepath.Base(s.path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	renamed := false
	defer func() {
		if !renamed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := s.step(StepWrite); err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("save state: write %s: %w", tmp.Name(), err)
	}
	if err := s.step(StepSync); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("save state: fsync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("save state: close %s: %w", tmp.Name(), err)
	}
	if err := s.step(StepRename); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), s.path); err != nil {
		return fmt.Errorf("save state: rename to %s: %w", s.path, err)
	}
	renamed = true
	// After the rename the new document is what a restart reads, but it is
	// not durable until the directory entry is on disk too.
	if err := s.step(StepSyncDir); err != nil {
		return err
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	return nil
}

// removeStaleTemps deletes temporary files left by a crash before their
// rename: they never became the document, so they hold nothing to keep.
func (s *Store) removeStaleTemps() {
	matches, _ := filepath.Glob(s.path + ".tmp-*")
	for _, m := range matches {
		_ = os.Remove(m)
	}
}

func (s *Store) step(st Step) error {
	if s.hook == nil {
		return nil
	}
	if err := s.hook(st); err != nil {
		return fmt.Errorf("save state: %s: %w", st, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("fsync directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}

// IsNotExist reports whether err says there is no stored document yet.
func IsNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
