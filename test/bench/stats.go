package bench

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Summary is the median and spread of repeated measurements, in seconds
// (JSON friendly, and the unit the tables print).
type Summary struct {
	// N is the number of samples.
	N int `json:"n"`
	// Median is the middle sample (mean of the two middle ones for even N).
	Median float64 `json:"median_s"`
	// Min and Max bound the samples.
	Min float64 `json:"min_s"`
	Max float64 `json:"max_s"`
	// Samples are the measurements in the order they were taken.
	Samples []float64 `json:"samples_s"`
}

// Summarize returns the median, min and max of samples. An empty input
// gives a zero Summary with N = 0, which tables print as "n/a".
func Summarize(samples []time.Duration) Summary {
	s := Summary{N: len(samples)}
	if len(samples) == 0 {
		return s
	}
	secs := make([]float64, len(samples))
	for i, d := range samples {
		secs[i] = d.Seconds()
	}
	s.Samples = slices.Clone(secs)
	slices.Sort(secs)
	s.Min, s.Max = secs[0], secs[len(secs)-1]
	mid := len(secs) / 2
	if len(secs)%2 == 1 {
		s.Median = secs[mid]
	} else {
		s.Median = (secs[mid-1] + secs[mid]) / 2
	}
	return s
}

// String renders "median [min–max]" in seconds, or "n/a" without samples.
func (s Summary) String() string {
	if s.N == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f s [%.2f–%.2f]", s.Median, s.Min, s.Max)
}

// Ratio returns a/b, or NaN when either is missing or b is zero: a ratio
// that cannot be computed must not print as a number.
func Ratio(a, b float64) float64 {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return math.NaN()
	}
	return a / b
}

// FormatRatio renders a ratio as "12.3x", or "n/a" for NaN.
func FormatRatio(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return "n/a"
	}
	return fmt.Sprintf("%.1fx", r)
}

// Table is a plain-text table with a header row; columns are padded to the
// widest cell so that it reads well in a terminal and in Markdown code
// blocks.
type Table struct {
	Header []string
	Rows   [][]string
}

// AddRow appends a row; missing cells print empty.
func (t *Table) AddRow(cells ...string) { t.Rows = append(t.Rows, cells) }

// String renders the table with two spaces between columns.
func (t *Table) String() string {
	widths := make([]int, len(t.Header))
	all := append([][]string{t.Header}, t.Rows...)
	for _, row := range all {
		for i, c := range row {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	var b strings.Builder
	for _, row := range all {
		for i := range widths {
			c := ""
			if i < len(row) {
				c = row[i]
			}
			if i > 0 {
				b.WriteString("  ")
			}
			b.WriteString(c)
			if i < len(widths)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-len([]rune(c))))
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}
