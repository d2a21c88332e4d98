package exec

import (
	"regexp"
	"strings"
	"testing"
)

// fencingPyValue is what fencing.py's stdin parser makes of a line's
// value: the line is trimmed, then one pair of enclosing double quotes
// stripped (_parse_input_stdin).
func fencingPyValue(line string) string {
	line = strings.TrimSpace(line)
	_, v, _ := strings.Cut(line, "=")
	return regexp.MustCompile(`^"(.*)"$`).ReplaceAllString(v, "$1")
}

// TestQuoteRoundTrip: every value reaches a fencing.py agent unchanged.
func TestQuoteRoundTrip(t *testing.T) {
	tests := []struct{ value, wire string }{
		{"plain", "plain"},
		{"with=equals", "with=equals"},
		{`"quoted"`, `""quoted""`},
		{` lead`, `" lead"`},
		{`trail `, `"trail "`},
		{`"`, `"`},
		{`a"b"`, `a"b"`},
		{``, ``},
	}
	for _, tc := range tests {
		t.Run(tc.value, func(t *testing.T) {
			if got := quote(tc.value); got != tc.wire {
				t.Fatalf("quote(%q) = %q, want %q", tc.value, got, tc.wire)
			}
			if got := fencingPyValue("password=" + quote(tc.value) + "\n"); got != tc.value {
				t.Fatalf("the agent reads %q, want %q", got, tc.value)
			}
		})
	}
}

// TestTail: output is capped, and a line cut at the start is dropped.
func TestTail(t *testing.T) {
	tests := []struct {
		name   string
		writes []string
		want   string
	}{
		{"under the cap", []string{"ab\n", "cd\n"}, "ab\ncd\n"},
		{"cut in a line", []string{"secret-line\nok\n"}, "ok\n"},
		{"one long write", []string{"xxxxxxxxxxxxxxxxxxxx\nlast\n"}, "last\n"},
		{"no newline left", []string{"xxxxxxxxxxxxxxxxxxxx"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tl := &tail{max: 8}
			for _, w := range tc.writes {
				if n, err := tl.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if got := string(tl.Bytes()); got != tc.want || len(tl.buf) > tl.max {
				t.Fatalf("kept %q (%d bytes), want %q", got, len(tl.buf), tc.want)
			}
		})
	}
}

// TestLastLine: the agent's message, without the time stamp and the
// usage hint fencing.py adds.
func TestLastLine(t *testing.T) {
	tests := []struct{ out, want string }{
		{"2026-11-25 12:22:57,805 ERROR: Failed: Timed out waiting to power OFF\n\n2026-11-25 12:22:57,805 ERROR: Please use '-h' for usage\n\n", "ERROR: Failed: Timed out waiting to power OFF"},
		{"  from pipes import quote\nConnection timed out\n", "Connection timed out"},
		{"/usr/sbin/fence_ipmilan:5: DeprecationWarning: 'pipes' is deprecated\n  from pipes import quote\n", ""},
		{"", ""},
	}
	for _, tc := range tests {
		if got := lastLine([]byte(tc.out)); got != tc.want {
			t.Errorf("lastLine(%q) = %q, want %q", tc.out, got, tc.want)
		}
	}
}
