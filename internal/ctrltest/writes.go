package ctrltest

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
)

// Write is one write a controller sent to a fake API server.
type Write struct {
	// Verb is create, update, patch, delete or delete-collection.
	Verb                  string
	Resource, Subresource string
	Namespace, Name       string
	// Object is the object sent (create, update), Patch the patch.
	Object runtime.Object
	Patch  []byte
}

// String is the form tables state writes in: "verb resource[/subresource]
// [namespace/]name", e.g. "update pods/status ns/db-0" or "patch
// volumeattachments va-1".
func (w Write) String() string {
	res := w.Resource
	if w.Subresource != "" {
		res += "/" + w.Subresource
	}
	name := w.Name
	if w.Namespace != "" {
		name = w.Namespace + "/" + name
	}
	return strings.TrimSpace(w.Verb + " " + res + " " + name)
}

// writeLog records the writes of both clientsets in the order they came.
type writeLog struct {
	mu     sync.Mutex
	writes []Write
}

// record is a reaction that logs writes and leaves them to the next
// reaction. A reaction a test prepends later runs before it: if it handles
// the action, the write is not logged.
func (l *writeLog) record(action clienttesting.Action) (bool, runtime.Object, error) {
	switch action.GetVerb() {
	case "create", "update", "patch", "delete", "delete-collection":
	default:
		return false, nil, nil // a read
	}
	w := Write{Verb: action.GetVerb(), Resource: action.GetResource().Resource, Subresource: action.GetSubresource(), Namespace: action.GetNamespace()}
	// Create and update actions share one interface (GetObject).
	if a, ok := action.(clienttesting.CreateAction); ok {
		w.Object = a.GetObject()
		w.Name = objectName(w.Object)
	}
	if a, ok := action.(clienttesting.PatchAction); ok {
		w.Name, w.Patch = a.GetName(), a.GetPatch()
	}
	if a, ok := action.(clienttesting.DeleteAction); ok {
		w.Name = a.GetName()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes = append(l.writes, w)
	return false, nil, nil
}

func objectName(obj runtime.Object) string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return m.GetName()
}

func (l *writeLog) drain() []Write {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.writes
	l.writes = nil
	return out
}

// CheckWrites says how got differs from steps, "" when it does not: got
// holds exactly the writes the steps name (Write.String), every write of a
// step before every write of the next, and any order within a step (a
// controller writes to several objects in parallel). No step means no
// write.
func CheckWrites(got []Write, steps ...[]string) string {
	n := 0
	for _, s := range steps {
		n += len(s)
	}
	if len(got) != n {
		return fmt.Sprintf("%d writes %v, want %d in the steps %q", len(got), got, n, steps)
	}
	i, left := 0, []string(nil)
	for _, w := range got {
		for len(left) == 0 {
			left, i = slices.Clone(steps[i]), i+1
		}
		j := slices.Index(left, w.String())
		if j < 0 {
			return fmt.Sprintf("writes %v: %q came where step %d wants one of %q (steps %q)", got, w, i, left, steps)
		}
		left = slices.Delete(left, j, j+1)
	}
	return ""
}

// WantWrites fails the test unless CheckWrites finds got as steps say.
func WantWrites(t testing.TB, got []Write, steps ...[]string) {
	t.Helper()
	if d := CheckWrites(got, steps...); d != "" {
		t.Error(d)
	}
}

// CheckEvents says how the Events got differ from want, "" when they do
// not: each wanted string is part of its own Event ("Warning
// FencelineForceDeleted" or a phrase of the message), in any order, and no
// Event is left over.
func CheckEvents(got []string, want ...string) string {
	if len(got) != len(want) || !matchEach(got, want, make([]bool, len(got))) {
		return fmt.Sprintf("Events %q, want one each containing %q", got, want)
	}
	return ""
}

// matchEach reports whether every want can be matched to a distinct Event
// not yet used that contains it.
func matchEach(got, want []string, used []bool) bool {
	if len(want) == 0 {
		return true
	}
	for i, ev := range got {
		if used[i] || !strings.Contains(ev, want[0]) {
			continue
		}
		used[i] = true
		if matchEach(got, want[1:], used) {
			return true
		}
		used[i] = false
	}
	return false
}

// WantEvents fails the test unless CheckEvents finds got as want says.
func WantEvents(t testing.TB, got []string, want ...string) {
	t.Helper()
	if d := CheckEvents(got, want...); d != "" {
		t.Error(d)
	}
}

// Want is what a table row expects of one sync: its writes in steps (see
// CheckWrites), its Events (see CheckEvents), and when it asks to be
// synced again.
type Want struct {
	Writes [][]string
	Events []string
	After  time.Duration
}

// Check fails the test where r differs from want. It leaves r.Err to the
// caller, who knows which error, if any, the row expects.
func (r Result) Check(t testing.TB, want Want) {
	t.Helper()
	if r.After != want.After {
		t.Errorf("the sync asks to look again after %s, want %s", r.After, want.After)
	}
	WantWrites(t, r.Writes, want.Writes...)
	WantEvents(t, r.Events, want.Events...)
}
