// Package apitext shapes free text for the API's message fields (condition
// messages, attempt messages, a driver's fence details) the same way in
// every component. It is a leaf.
package apitext

import "unicode/utf8"

// Ellipsis ends a message that was cut.
const Ellipsis = "..."

// Truncate returns s cut to at most n bytes, ending with Ellipsis when it
// was cut. It cuts on a rune boundary, so that a message never carries a
// broken UTF-8 sequence (which would reach users as replacement
// characters). s is returned as is when it fits; n below len(Ellipsis)
// cuts to nothing but what fits of the ellipsis.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= len(Ellipsis) {
		return Ellipsis[:max(n, 0)]
	}
	cut := n - len(Ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + Ellipsis
}
