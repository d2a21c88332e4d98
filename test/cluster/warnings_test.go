package cluster

import (
	"slices"
	"testing"

	"k8s.io/client-go/rest"
)

func TestWarningRecorder(t *testing.T) {
	var _ rest.WarningHandler = &WarningRecorder{}
	cases := []struct {
		name     string
		warnings []string
	}{
		{"none", nil},
		{"one", []string{"unknown field \"spec.x\""}},
		{"in order", []string{"first", "second", "first"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := &WarningRecorder{}
			for _, text := range tc.warnings {
				w.HandleWarningHeader(299, "kube-apiserver", text)
			}
			if got := w.Take(); !slices.Equal(got, tc.warnings) {
				t.Errorf("Take() = %q, want %q", got, tc.warnings)
			}
			if got := w.Take(); len(got) != 0 {
				t.Errorf("a second Take() = %q, want nothing", got)
			}
		})
	}
}
