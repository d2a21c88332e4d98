package cluster

import "sync"

// WarningRecorder is a rest.WarningHandler that keeps the API server's
// warnings (deprecated APIs, unknown fields, Pod Security "would violate"
// notes), so that a test can fail on any of them.
type WarningRecorder struct {
	mu       sync.Mutex
	warnings []string
}

// HandleWarningHeader implements rest.WarningHandler.
func (w *WarningRecorder) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.warnings = append(w.warnings, text)
}

// Take returns the warnings recorded since the last Take and forgets them.
func (w *WarningRecorder) Take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.warnings
	w.warnings = nil
	return out
}
