package apitext

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    string
		n    int
		want string
	}{
		{"fits", "fenced", 6, "fenced"},
		{"empty", "", 0, ""},
		{"cut with an ellipsis", "the power was read back Off", 12, "the power..."},
		{"never inside a rune", "état éteint", 8, "état..."},
		{"a rune straddling the cut is left out", "aaaaé", 8, "aaaaé"},
		{"a rune straddling the cut is left out when cut", "aéaaaa", 5, "a..."},
		{"too short for more than the ellipsis", "abcdef", 2, ".."},
		{"negative bound", "abc", -1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Truncate(tc.s, tc.n)
			if got != tc.want {
				t.Errorf("Truncate(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
			}
			if len(got) > max(tc.n, 0) || !utf8.ValidString(got) {
				t.Errorf("Truncate(%q, %d) = %q: %d bytes, valid UTF-8 %v", tc.s, tc.n, got, len(got), utf8.ValidString(got))
			}
		})
	}
	long := strings.Repeat("é", 1000)
	if got := Truncate(long, 1024); len(got) > 1024 || !utf8.ValidString(got) || !strings.HasSuffix(got, Ellipsis) {
		t.Errorf("a long message: %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
}
