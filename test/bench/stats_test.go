package bench

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name             string
		in               []time.Duration
		n                int
		median, min, max float64
	}{
		{name: "empty", in: nil, n: 0},
		{name: "one sample", in: []time.Duration{3 * s}, n: 1, median: 3, min: 3, max: 3},
		{name: "odd count, unsorted", in: []time.Duration{5 * s, 1 * s, 3 * s}, n: 3, median: 3, min: 1, max: 5},
		{name: "even count averages the middle two", in: []time.Duration{4 * s, 1 * s, 2 * s, 10 * s}, n: 4, median: 3, min: 1, max: 10},
		{name: "sub-second", in: []time.Duration{250 * time.Millisecond, 750 * time.Millisecond}, n: 2, median: 0.5, min: 0.25, max: 0.75},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Summarize(tc.in)
			if got.N != tc.n || got.Median != tc.median || got.Min != tc.min || got.Max != tc.max {
				t.Fatalf("Summarize(%v) = %+v, want n=%d median=%v min=%v max=%v", tc.in, got, tc.n, tc.median, tc.min, tc.max)
			}
			if len(got.Samples) != len(tc.in) {
				t.Fatalf("kept %d samples, want %d", len(got.Samples), len(tc.in))
			}
			for i, d := range tc.in {
				if got.Samples[i] != d.Seconds() {
					t.Fatalf("sample %d = %v, want %v (input order kept)", i, got.Samples[i], d.Seconds())
				}
			}
		})
	}
}

func TestSummaryString(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   Summary
		want string
	}{
		{name: "no samples", in: Summary{}, want: "n/a"},
		{name: "samples", in: Summary{N: 3, Median: 1.234, Min: 0.5, Max: 20}, want: "1.23 s [0.50–20.00]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.in.String(); got != tc.want {
				t.Fatalf("String() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRatio(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b float64
		want string
	}{
		{name: "upstream slower", a: 12, b: 1.5, want: "8.0x"},
		{name: "equal", a: 2, b: 2, want: "1.0x"},
		{name: "zero denominator", a: 2, b: 0, want: "n/a"},
		{name: "missing numerator", a: math.NaN(), b: 1, want: "n/a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := FormatRatio(Ratio(tc.a, tc.b)); got != tc.want {
				t.Fatalf("FormatRatio(Ratio(%v, %v)) = %q, want %q", tc.a, tc.b, got, tc.want)
			}
		})
	}
}

func TestTableAlignsColumns(t *testing.T) {
	tb := Table{Header: []string{"metric", "U", "F"}}
	tb.AddRow("taint → pods deleted", "12.00 s", "0.30 s")
	tb.AddRow("short", "1")
	lines := strings.Split(strings.TrimRight(tb.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("got %d lines, want 3:\n%s", len(lines), tb.String())
	}
	// The second column starts at the same rune offset on every line.
	col := func(line, cell string) int { return len([]rune(line[:strings.Index(line, cell)])) }
	if a, b := col(lines[0], "U"), col(lines[1], "12.00 s"); a != b {
		t.Fatalf("column 2 at %d in the header, %d in row 1:\n%s", a, b, tb.String())
	}
	if a, b := col(lines[0], "U"), col(lines[2], "1"); a != b {
		t.Fatalf("column 2 at %d in the header, %d in a short row:\n%s", a, b, tb.String())
	}
}
