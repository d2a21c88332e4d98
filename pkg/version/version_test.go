package version

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestCommitOf(t *testing.T) {
	for _, tc := range []struct {
		name     string
		settings []debug.BuildSetting
		want     string
	}{
		{"clean checkout", []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "false"}}, "abc"},
		{"local changes", []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "true"}}, "abc-dirty"},
		{"no VCS information", []debug.BuildSetting{{Key: "GOOS", Value: "linux"}}, "unknown"},
	} {
		if got := commitOf(tc.settings); got != tc.want {
			t.Errorf("%s: commitOf = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestString(t *testing.T) {
	s := String()
	if !strings.HasPrefix(s, Version+" (commit ") || !strings.HasSuffix(s, runtime.Version()+")") {
		t.Errorf("String() = %q, want the version, the commit and %s", s, runtime.Version())
	}
}
